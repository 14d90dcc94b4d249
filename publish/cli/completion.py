"""``publish completion bash|zsh``: a completion script made from the verb table and each verb's flag set.

Nothing here is a copy of a verb's flags: publish.cli hands over the verbs (name, summary, flags) as they are
declared, and the framework names come from publish.frameworks.  The scripts follow Go's ``flag`` rules: a
flag is offered only before the first argument that is not one (and before ``--``), a flag that takes a
value is followed by its value, never by another flag.
"""

from __future__ import annotations

from publish.frameworks import FRAMEWORKS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from publish.rules.go.flags import Flag

    Verb = tuple[str, str, list[Flag[Any]]]  # name, summary, flags ([] for the verbs main answers itself)

SHELLS = ("bash", "zsh")


def script(shell: str, verbs: list[Verb]) -> str:
    """The script for ``shell`` (one of SHELLS)."""
    for name, _, flags in verbs:  # every word goes into the script unquoted: plain names only
        assert _plain(name) and all(_plain(flag.name) for flag in flags), name
    return _bash(verbs) if shell == "bash" else _zsh(verbs)


def _plain(word: str) -> bool:
    return bool(word) and all(c.isascii() and (c.isalnum() or c in "-_") for c in word)


def _valued(flag: Flag[Any]) -> bool:
    return flag.kind not in ("bool", "boolean_like")


def _values_bash(name: str) -> str:
    """How the value of the flag ``name`` is completed in bash (an empty reply falls back to file names)."""
    if name == "framework":
        return f"COMPREPLY=($(compgen -W '{' '.join(FRAMEWORKS)}' -- \"$cur\"))"
    if name == "checkpoint":
        return 'COMPREPLY=($(compgen -d -- "$cur"))'
    return ""


def _bash(verbs: list[Verb]) -> str:
    names = " ".join(name for name, _, _ in verbs)
    cases = []
    for name, _, flags in verbs:
        if name == "help":
            cases.append(
                f"    help) ((COMP_CWORD == 2)) && COMPREPLY=($(compgen -W '{names}' -- \"$cur\")) ;;"
            )
        elif name == "completion":
            shells = " ".join(SHELLS)
            cases.append(
                f"    completion) ((COMP_CWORD == 2)) && COMPREPLY=($(compgen -W '{shells}' -- \"$cur\")) ;;"
            )
        elif flags:
            offered = " ".join("-" + f.name for f in flags)
            valued = " ".join(f.name for f in flags if _valued(f))
            cases.append(f"    {name}) _publish_flags '{offered}' ' {valued} ' ;;")
    flag_names = sorted({f.name for _, _, fl in verbs for f in fl})
    values = [f"    {name}) {_values_bash(name)} ;;" for name in flag_names if _values_bash(name)]
    return "\n".join(
        [
            "# bash completion for publish, made by `publish completion bash` from its verbs and flags.",
            "# Use: source <(publish completion bash)",
            "_publish_value() {",
            "    case $1 in",
            *values,
            "    esac",
            "}",
            "",
            "# Go's flag rules: flags until the first argument that is not one, or --; a flag that takes a value",
            "# (-name value) is followed by it.  $1: the verb's flags, $2: the names of those that take a value.",
            "_publish_flags() {",
            "    local i=2 word name",
            "    while ((i < COMP_CWORD)); do",
            "        word=${COMP_WORDS[i]}",
            "        [[ $word == -?* && $word != -- ]] || return 0",
            "        name=${word#-}",
            "        name=${name#-}",
            "        i=$((i + 1))",
            '        if [[ $name != *=* && $2 == *" $name "* ]]; then',
            "            if ((i == COMP_CWORD)); then",
            '                _publish_value "$name"',
            "                return 0",
            "            fi",
            "            i=$((i + 1))",
            "        fi",
            "    done",
            "    if [[ $cur == -* ]]; then",
            '        COMPREPLY=($(compgen -W "$1" -- "$cur"))',
            "    fi",
            "}",
            "",
            "_publish() {",
            "    local cur=${COMP_WORDS[COMP_CWORD]}",
            "    COMPREPLY=()",
            "    if ((COMP_CWORD == 1)); then",
            f"        [[ $cur == -* ]] || COMPREPLY=($(compgen -W '{names}' -- \"$cur\"))",
            "        return 0",
            "    fi",
            "    case ${COMP_WORDS[1]} in",
            *cases,
            "    esac",
            "    return 0",
            "}",
            "",
            "complete -o default -F _publish publish",
            "",
        ]
    )


def _zsh_quote(text: str) -> str:
    """``text`` inside single quotes."""
    return "'" + text.replace("'", "'\\''") + "'"


def _zsh_describe(text: str) -> str:
    """A flag's usage as an _arguments description: one line, its brackets and colons escaped."""
    text = " ".join(text.replace("`", "").split())
    for c in "\\[]:":
        text = text.replace(c, "\\" + c)
    return text


def _zsh_flag(flag: Flag[Any]) -> str:
    described = f"-{flag.name}{'=' if _valued(flag) else ''}[{_zsh_describe(flag.usage)}]"
    if not _valued(flag):
        return _zsh_quote(described)
    usage = flag.usage
    start = usage.find("`")
    end = usage.find("`", start + 1) if start >= 0 else -1
    metavar = usage[start + 1 : end] if end > start >= 0 else flag.metavar or "value"
    action = " "
    if flag.name == "framework":
        action = "(" + " ".join(FRAMEWORKS) + ")"
    elif flag.name == "checkpoint":
        action = "_files -/"
    return _zsh_quote(f"{described}:{_zsh_describe(metavar)}:{action}")


def _zsh(verbs: list[Verb]) -> str:
    described = [_zsh_quote(f"{name}:{' '.join(summary.split())}") for name, summary, _ in verbs]
    cases = []
    for name, _, flags in verbs:
        if name == "help":
            cases.append("    (help) ((CURRENT == 2)) && _describe -t verbs 'publish verb' verbs ;;")
        elif name == "completion":
            cases.append(f"    (completion) ((CURRENT == 2)) && compadd {' '.join(SHELLS)} ;;")
        elif flags:
            specs = [_zsh_flag(f) for f in flags] + ["'*:argument:_files'"]
            cases.append(f"    ({name})")
            cases.append("        _arguments -S -A '-*' \\\n            " + " \\\n            ".join(specs))
            cases.append("        ;;")
    return "\n".join(
        [
            "#compdef publish",
            "# zsh completion for publish, made by `publish completion zsh` from its verbs and flags.",
            "# Use: publish completion zsh > DIR/_publish, DIR a folder on $fpath before compinit runs;",
            "# or, after compinit: source <(publish completion zsh)",
            "",
            "_publish() {",
            "    local -a verbs",
            "    verbs=(",
            *[f"        {line}" for line in described],
            "    )",
            "    if ((CURRENT == 2)); then",
            "        _describe -t verbs 'publish verb' verbs",
            "        return",
            "    fi",
            "    local verb=$words[2]",
            "    shift words",
            "    ((CURRENT--))",
            "    case $verb in",
            *cases,
            "    esac",
            "}",
            "",
            "if [[ $zsh_eval_context[-1] == loadautofunc ]]; then",
            '    _publish "$@"',
            "else",
            "    compdef _publish publish",
            "fi",
            "",
        ]
    )
