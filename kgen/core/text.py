"""Counted nouns in what kgen prints: "1 kernel", "3 kernels", "1 strategy", never "kernel(s)".

One helper, so the rule for a plural is written once and every message asks it.
"""

from __future__ import annotations


def plural(noun: str) -> str:
    """The regular English plural: strategy -> strategies, key -> keys, pass -> passes."""
    if noun.endswith("y") and noun[-2:-1] not in tuple("aeiou"):
        return noun[:-1] + "ies"
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    return noun + "s"


def counted(count: int, noun: str, plural_form: str | None = None) -> str:
    """``count`` and the noun in the form that count takes: ``counted(1, "strategy")`` is
    "1 strategy", ``counted(0, "kernel")`` "0 kernels"; ``plural_form`` for an irregular noun
    (or a phrase whose plural is not at its end: ``counted(2, "shape set")`` is regular)."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {plural_form or plural(noun)}"
