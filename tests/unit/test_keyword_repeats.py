"""Keyword patterns with oversized repeat counts are refused before ``regex`` compiles them
(compiling allocates in proportion to the count), on the API's save path and the dispatcher's
compile path alike: the dispatcher never compiles a stored one, it rejects the agent instead."""

from __future__ import annotations

import pytest

from services.dispatcher.selection import trigger_rejection
from switchboard.contracts import TriggerConfig
from switchboard.keyword_patterns import (
    MAX_REPEAT,
    KeywordPatternError,
    cached_keyword,
    check_keyword,
    check_repeats,
    compile_keyword,
)
from tests.unit.dispatcher.builders import dispatch

# Small enough to compile harmlessly if the check were missing (so these tests fail, not OOM).
TOO_LARGE = [
    pytest.param(f"a{{{MAX_REPEAT + 1}}}", id="n"),
    pytest.param(f"a{{{MAX_REPEAT + 1},}}", id="n-or-more"),
    pytest.param(f"a{{0,{MAX_REPEAT + 1}}}", id="n-to-m"),
    pytest.param(f"a{{,{MAX_REPEAT + 1}}}", id="up-to-m"),
    pytest.param("a{1001}?", id="lazy"),
    pytest.param("a{1001}+", id="possessive"),
    pytest.param("(?:a{100}){11}", id="nested-product"),
    pytest.param("(?=(?:x|a{100}){11})", id="nested-in-lookahead-and-branch"),
    pytest.param("(?x)a{1 001}", id="verbose-mode-spaces"),
    pytest.param("(?x)a{1#comment\n001}", id="verbose-mode-comment"),
    pytest.param("x(?x)a{1 001}", id="verbose-flag-mid-pattern"),
]


@pytest.mark.parametrize("pattern", TOO_LARGE)
def test_too_large_repeats_are_refused_before_compiling(pattern: str) -> None:
    for check in (compile_keyword, check_keyword):
        with pytest.raises(KeywordPatternError) as refused:
            check(pattern)
        assert refused.value.code == "keyword_regex_repeat_too_large"


# Through ``check_repeats`` only, never a compile: were the check to regress, compiling these
# would exhaust the test machine's memory instead of failing.
@pytest.mark.parametrize("pattern", ["a{5000000}", "[ab]{2147483647}", "((a{1000}){1000}){1000}"])
def test_counts_that_would_take_gigabytes_are_refused_at_once(pattern: str) -> None:
    with pytest.raises(KeywordPatternError) as refused:
        check_repeats(pattern)
    assert refused.value.code == "keyword_regex_repeat_too_large"


@pytest.mark.parametrize("pattern", TOO_LARGE)
def test_the_dispatcher_rejects_a_stored_pattern_with_too_large_repeats(pattern: str) -> None:
    assert cached_keyword(pattern) is None
    trigger = TriggerConfig(event_types=("message",), keyword_regex=pattern)
    assert trigger_rejection(trigger, dispatch("a" * 1_100)) == "keyword_regex_invalid"


@pytest.mark.parametrize(
    "pattern",
    [
        f"a{{{MAX_REPEAT}}}",
        "(?:a{10}){100}",
        r"\d{3}\.?\d{3}\.?\d{3}-?\d{2}|\d{2}\.?\d{3}\.?\d{3}/?\d{4}-?\d{2}",  # CPF or CNPJ: not nested
        "[a{5000}]",  # braces in a set are literal
        r"\{5000}",  # an escaped brace too
        r"(?:\w+\s){0,5}pix",
    ],
)
def test_counts_within_the_limit_and_literal_braces_compile(pattern: str) -> None:
    check_keyword(pattern)
    assert cached_keyword(pattern) is not None


# regex raises ValueError, not regex.error, for conflicting inline flags: invalid too, so the
# dispatcher's cache (which expects KeywordPatternError) cannot be crashed by one.
@pytest.mark.parametrize("pattern", ["pre(ço", "(?V1)a{1001}", "(?a)(?u)x"])
def test_a_pattern_that_does_not_parse_is_still_invalid(pattern: str) -> None:
    with pytest.raises(KeywordPatternError) as refused:
        compile_keyword(pattern)
    assert refused.value.code == "keyword_regex_invalid"
    assert cached_keyword(pattern) is None
