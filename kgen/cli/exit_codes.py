"""The exit codes of `kgen`: what each means, written once.

`kgen --help` lists them from here, the commands exit with these names, and the README's
"Exit codes:" sentence is checked against them (``tests/kgen/cli/test_command_line.py``).
"""

from __future__ import annotations

#: a verified kernel for every target (every selected problem of a suite); `kgen eval`: the candidate passed
SUCCESS = 0
#: some target (selected problem) without a verified kernel; `kgen eval`: the candidate was rejected
NOT_VERIFIED = 1
#: bad usage: an unknown problem, target or run, a missing file, an invalid option, a key or
#: server that cannot be used (a ``kgen.errors.KgenUsageError``)
BAD_USAGE = 2
#: `kgen run`: a verified kernel for every target but no model produced code; `kgen eval`:
#: inconclusive (kgen could not judge the candidate here)
NO_MODEL_CODE_OR_INCONCLUSIVE = 3
#: interrupted (Ctrl-C, SIGTERM); the command says how to continue
INTERRUPTED = 130

#: code -> what it means, in the order `kgen --help` lists them
EXIT_CODES: dict[int, str] = {
    SUCCESS: "success (a verified kernel for every target or selected problem; eval: the candidate passed)",
    NOT_VERIFIED: "no verified kernel for some target or selected problem (eval: the candidate was rejected)",
    BAD_USAGE: "bad usage (request, problem, target, file, option, key or server)",
    NO_MODEL_CODE_OR_INCONCLUSIVE: "run: a verified kernel, but no model produced code; eval: inconclusive",
    INTERRUPTED: "interrupted (it says how to continue)",
}


def exit_codes_text() -> str:
    """One sentence for `--help`: ``Exit codes: 0 success (...), 1 ..., 130 interrupted (...).``"""
    return "Exit codes: " + ", ".join(f"{code} {meaning}" for code, meaning in EXIT_CODES.items()) + "."
