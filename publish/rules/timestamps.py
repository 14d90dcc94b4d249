"""The times an entry carries: an S3 LastModified (ISO 8601 in UTC, or an HTTP date in a HEAD's
Last-Modified) as seconds since the epoch, and the retention windows read from them.  Pure and linear; no
datetime (start-up time): only prune and status ask."""

from __future__ import annotations


def _days_from_civil(y: int, m: int, d: int) -> int:
    """Days from 1970-01-01 to the proleptic Gregorian date (Howard Hinnant's algorithm)."""
    y -= m <= 2
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def iso8601(text: str) -> float:
    """``YYYY-MM-DDTHH:MM:SS[.fraction]Z`` (what S3 sends as LastModified) as seconds since the epoch;
    ValueError for anything else (an offset other than Z, a field out of range)."""
    if len(text) < 20 or len(text) > 40 or not text.endswith("Z"):
        raise ValueError("not YYYY-MM-DDTHH:MM:SS[.fff]Z")
    head, frac = text[:19], text[19:-1]
    if (head[4], head[7], head[10], head[13], head[16]) != ("-", "-", "T", ":", ":"):
        raise ValueError("not YYYY-MM-DDTHH:MM:SS[.fff]Z")
    fields = (head[0:4], head[5:7], head[8:10], head[11:13], head[14:16], head[17:19])
    if not all(f.isascii() and f.isdigit() for f in fields):
        raise ValueError("not YYYY-MM-DDTHH:MM:SS[.fff]Z")
    year, month, day, hour, minute, second = map(int, fields)
    if frac and (frac[0] != "." or not frac[1:].isascii() or not frac[1:].isdigit()):
        raise ValueError("not YYYY-MM-DDTHH:MM:SS[.fff]Z")
    if not (1 <= month <= 12 and 1 <= day <= _MONTH_DAYS[month - 1] and hour < 24 and minute < 60):
        raise ValueError("a field out of range")
    if second > 60 or (month == 2 and day == 29 and not (year % 4 == 0 and (year % 100 or year % 400 == 0))):
        raise ValueError("a field out of range")
    seconds = _days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second
    return seconds + (float("0" + frac) if frac else 0.0)


_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def http_date(text: str) -> float:
    """An HTTP date as S3 sends it in Last-Modified (RFC 9110's IMF-fixdate, ``Sun, 06 Nov 1994 08:49:37 GMT``)
    as seconds since the epoch; ValueError for anything else."""
    if len(text) != 29 or text[3:5] != ", " or text[25:] != " GMT" or text[:3] not in _WEEKDAYS:
        raise ValueError("not an HTTP date (Sun, 06 Nov 1994 08:49:37 GMT)")
    if (text[7], text[11], text[16], text[19], text[22]) != (" ", " ", " ", ":", ":"):
        raise ValueError("not an HTTP date (Sun, 06 Nov 1994 08:49:37 GMT)")
    month = text[8:11]
    if month not in _MONTHS:
        raise ValueError("not an HTTP date (Sun, 06 Nov 1994 08:49:37 GMT)")
    iso = f"{text[12:16]}-{_MONTHS.index(month) + 1:02d}-{text[5:7]}T{text[17:25]}Z"
    return iso8601(iso)


def rfc3339(seconds: float) -> str:
    """Seconds since the epoch as ``YYYY-MM-DDTHH:MM:SS.ffffffZ``, for status's documents."""
    import time

    whole = int(seconds // 1)
    micros = int(round((seconds - whole) * 1_000_000))
    if micros == 1_000_000:
        whole, micros = whole + 1, 0
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{micros:06d}Z"
