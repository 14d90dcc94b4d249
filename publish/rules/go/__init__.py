"""Go's conventions: the flag package (parsing, messages, usage text) and strconv/time's parsers and
formats (ParseBool, ParseDuration, Duration.String, %q, plain decimals)."""
