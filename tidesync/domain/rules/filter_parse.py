"""Reading a row filter's text into its tree: a tokenizer and a recursive-descent parser, both
bounded (text length, literal sizes, conditions, nesting, IN list length) before they work.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from decimal import Decimal

from tidesync.domain.rules.filter_ast import (
    BUSINESS_TIME,
    IDENTIFIER_CHARS,
    RESERVED_WORDS,
    And,
    Between,
    BusinessTime,
    Column,
    Compare,
    Condition,
    FilterError,
    InList,
    IsNull,
    Like,
    Literal,
    LiteralValue,
    Not,
    Operand,
    Or,
    Predicate,
    StartsWith,
)
from tidesync.domain.rules.filter_like import LikePattern

MAX_TEXT = 4096
"""Characters in a filter."""
MAX_STRING = 256
"""Characters in one string literal, LIKE pattern or STARTS WITH prefix."""
MAX_DIGITS = 65
"""Digits in a number (MySQL's DECIMAL precision), at most `MAX_SCALE` after the point."""
MAX_SCALE = 30
MAX_NAME = 64
"""Characters in a column name (MySQL's limit)."""
MAX_CONDITIONS = 256
"""Comparisons plus AND, OR and NOT in one filter."""
MAX_DEPTH = 32
"""Nested parentheses and NOTs."""
MAX_IN_ITEMS = 1000
"""Values in one IN list."""

_OPERATORS = ("<>", "!=", "<=", ">=", "=", "<", ">")
_PUNCTUATION = frozenset("(),-")
_WHITESPACE = frozenset(" \t\r\n")
_DIGITS = frozenset("0123456789")
_TIMESTAMP = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[ T]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,6}))?")
_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")


@dataclass(frozen=True, slots=True)
class Token:
    """`kind` is one of: name, quoted (a backquoted name), string, number, operator, punctuation
    (`text` holds the character), business_time, end."""

    kind: str
    text: str
    position: int


# --- tokens ---------------------------------------------------------------------------------


def tokenize(text: str) -> list[Token]:
    if len(text) > MAX_TEXT:
        raise FilterError(f"a filter is at most {MAX_TEXT} characters", MAX_TEXT)
    tokens: list[Token] = []
    position = 0
    while position < len(text):
        char = text[position]
        if char in _WHITESPACE:
            position += 1
            continue
        token, position = _next_token(text, position)
        tokens.append(token)
    tokens.append(Token("end", "", len(text)))
    return tokens


def _next_token(text: str, start: int) -> tuple[Token, int]:
    char = text[start]
    if char == "'":
        value, end = _quoted(text, start, "'", "string literal", MAX_STRING)
        return Token("string", value, start), end
    if char == "`":
        value, end = _quoted(text, start, "`", "quoted column name", MAX_NAME)
        if not value:
            raise FilterError("a quoted column name cannot be empty", start)
        return Token("quoted", value, start), end
    if char in _DIGITS:
        return _number(text, start)
    if char in IDENTIFIER_CHARS:
        end = _name_end(text, start)
        return Token("name", text[start:end], start), end
    if char == "$":
        end = _name_end(text, start + 1)
        if text[start:end].lower() != BUSINESS_TIME:
            raise FilterError(f"the only $ name is {BUSINESS_TIME}", start)
        return Token("business_time", BUSINESS_TIME, start), end
    for operator in _OPERATORS:
        if text.startswith(operator, start):
            return Token("operator", "<>" if operator == "!=" else operator, start), (
                start + len(operator))
    if char in _PUNCTUATION:
        return Token("punctuation", char, start), start + 1
    raise FilterError("unexpected character", start)


def _name_end(text: str, start: int) -> int:
    end = start
    while end < len(text) and text[end] in IDENTIFIER_CHARS:
        end += 1
    if end - start > MAX_NAME:
        raise FilterError(f"a column name is at most {MAX_NAME} characters", start)
    return end


def _quoted(text: str, start: int, quote: str, what: str, limit: int) -> tuple[str, int]:
    """The text between `quote`s from `start`, a doubled quote standing for one."""
    parts: list[str] = []
    position = start + 1
    while True:
        close = text.find(quote, position)
        if close < 0:
            raise FilterError(f"unterminated {what}", start)
        parts.append(text[position:close])
        if not text.startswith(quote, close + 1):
            break
        parts.append(quote)
        position = close + 2
    value = "".join(parts)
    if len(value) > limit:
        raise FilterError(f"a {what} is at most {limit} characters", start)
    if "\x00" in value or any("\ud800" <= char <= "\udfff" for char in value):
        raise FilterError(f"a {what} cannot hold NUL or unpaired surrogate characters", start)
    return value, close + 1


def _number(text: str, start: int) -> tuple[Token, int]:
    end = start
    while end < len(text) and text[end] in _DIGITS:
        end += 1
    digits, scale = end - start, 0
    if end + 1 < len(text) and text[end] == "." and text[end + 1] in _DIGITS:
        fraction_start = end = end + 1
        while end < len(text) and text[end] in _DIGITS:
            end += 1
        scale = end - fraction_start
    if digits + scale > MAX_DIGITS or scale > MAX_SCALE:
        raise FilterError(
            f"a number has at most {MAX_DIGITS} digits, {MAX_SCALE} after the point", start)
    if end < len(text) and (text[end] in IDENTIFIER_CHARS or text[end] == "."):
        raise FilterError("malformed number", start)
    return Token("number", text[start:end], start), end


# --- the grammar ----------------------------------------------------------------------------


class Parser:
    """filter := or; or := and (OR and)*; and := not (AND not)*; not := NOT not | primary;
    primary := '(' or ')' | predicate; predicate := operand followed by a comparison."""

    def __init__(self, text: str) -> None:
        self._tokens = tokenize(text)
        self._index = 0
        self._depth = 0
        self._conditions = 0

    def parse(self) -> Condition:
        if self._peek().kind == "end":
            raise FilterError("the filter is empty")
        condition = self._or()
        token = self._peek()
        if token.kind != "end":
            raise FilterError(f"unexpected {_describe(token)}", token.position)
        return condition

    # Tokens.

    def _peek(self) -> Token:
        return self._tokens[self._index]

    def _take(self) -> Token:
        token = self._tokens[self._index]
        self._index += 1
        return token

    def _at_keyword(self, *words: str) -> bool:
        token = self._peek()
        return token.kind == "name" and token.text.upper() in words

    def _expect_keyword(self, word: str) -> Token:
        if not self._at_keyword(word):
            token = self._peek()
            raise FilterError(f"expected {word}, found {_describe(token)}", token.position)
        return self._take()

    def _expect_punctuation(self, char: str) -> Token:
        token = self._peek()
        if token.kind != "punctuation" or token.text != char:
            raise FilterError(f"expected '{char}', found {_describe(token)}", token.position)
        return self._take()

    # Limits.

    def _counted(self, condition: Condition) -> Condition:
        self._conditions += 1
        if self._conditions > MAX_CONDITIONS:
            raise FilterError(f"a filter has at most {MAX_CONDITIONS} conditions",
                              self._peek().position)
        return condition

    def _enter(self, token: Token) -> None:
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise FilterError(f"a filter nests at most {MAX_DEPTH} deep", token.position)

    # Conditions.

    def _or(self) -> Condition:
        items = [self._and()]
        while self._at_keyword("OR"):
            self._take()
            items.append(self._and())
        return items[0] if len(items) == 1 else self._counted(Or(tuple(items)))

    def _and(self) -> Condition:
        items = [self._not()]
        while self._at_keyword("AND"):
            self._take()
            items.append(self._not())
        return items[0] if len(items) == 1 else self._counted(And(tuple(items)))

    def _not(self) -> Condition:
        if not self._at_keyword("NOT"):
            return self._primary()
        self._enter(self._take())
        item = self._not()
        self._depth -= 1
        return self._counted(Not(item))

    def _primary(self) -> Condition:
        token = self._peek()
        if token.kind != "punctuation" or token.text != "(":
            return self._counted(self._predicate())
        self._enter(self._take())
        inner = self._or()
        self._expect_punctuation(")")
        self._depth -= 1
        return inner

    def _predicate(self) -> Predicate:
        operand = self._operand()
        token = self._peek()
        if token.kind == "operator":
            self._take()
            return Compare(operand, token.text, self._literal())
        if self._at_keyword("IS"):
            self._take()
            negated = self._skip_not()
            self._expect_keyword("NULL")
            return IsNull(operand, negated)
        negated = self._skip_not()
        if self._at_keyword("IN"):
            self._take()
            return InList(operand, self._in_items(), negated)
        if self._at_keyword("BETWEEN"):
            self._take()
            low = self._literal()
            self._expect_keyword("AND")
            return Between(operand, low, self._literal(), negated)
        if self._at_keyword("LIKE"):
            self._take()
            return Like(operand, LikePattern.parse(self._string("LIKE")), negated)
        if self._at_keyword("STARTS"):
            self._take()
            self._expect_keyword("WITH")
            return StartsWith(operand, self._string("STARTS WITH"), negated)
        token = self._peek()
        raise FilterError(f"expected a comparison, IN, BETWEEN, IS, LIKE or STARTS WITH, "
                          f"found {_describe(token)}", token.position)

    def _skip_not(self) -> bool:
        if self._at_keyword("NOT"):
            self._take()
            return True
        return False

    def _operand(self) -> Operand:
        token = self._peek()
        if token.kind == "business_time":
            self._take()
            return BusinessTime(token.position)
        if token.kind == "quoted" or (token.kind == "name"
                                      and token.text.upper() not in RESERVED_WORDS):
            self._take()
            return Column(token.text, token.position)
        raise FilterError(f"expected a column name, found {_describe(token)}", token.position)

    def _in_items(self) -> tuple[Literal, ...]:
        self._expect_punctuation("(")
        items = [self._literal()]
        while self._peek().text == "," and self._peek().kind == "punctuation":
            self._take()
            if len(items) == MAX_IN_ITEMS:
                raise FilterError(f"an IN list holds at most {MAX_IN_ITEMS} values",
                                  self._peek().position)
            items.append(self._literal())
        self._expect_punctuation(")")
        return tuple(items)

    def _string(self, after: str) -> str:
        token = self._peek()
        if token.kind != "string":
            raise FilterError(f"{after} takes a string literal, found {_describe(token)}",
                              token.position)
        return self._take().text

    # Literals.

    def _literal(self) -> Literal:
        token = self._take()
        return Literal(self._literal_value(token), token.position)

    def _literal_value(self, token: Token) -> LiteralValue:
        if token.kind == "string":
            return token.text
        if token.kind == "number":
            return _number_value(token.text)
        if token.kind == "punctuation" and token.text == "-":
            number = self._take()
            if number.kind != "number":
                raise FilterError("'-' must be followed by a number", token.position)
            return _number_value("-" + number.text)
        word = token.text.upper() if token.kind == "name" else ""
        if word in _CONSTANTS:
            return _CONSTANTS[word]
        if word in ("TIMESTAMP", "DATE"):
            quoted = self._take()
            if quoted.kind != "string":
                raise FilterError(f"{word} takes a quoted value", quoted.position)
            return _timestamp(quoted) if word == "TIMESTAMP" else _date(quoted)
        raise FilterError(f"expected a value, found {_describe(token)}", token.position)


_CONSTANTS: dict[str, LiteralValue] = {"TRUE": True, "FALSE": False, "NULL": None}


def _number_value(text: str) -> int | Decimal:
    return Decimal(text) if "." in text else int(text)


def _timestamp(token: Token) -> dt.datetime:
    match = _TIMESTAMP.fullmatch(token.text)
    try:
        if match is None:
            raise ValueError(token.text)
        year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
        micro = int((match.group(7) or "0").ljust(6, "0"))
        moment = dt.datetime(year, month, day, hour, minute, second, micro, tzinfo=dt.UTC)
    except ValueError:
        raise FilterError("a TIMESTAMP is 'YYYY-MM-DD HH:MM:SS[.ffffff]' (UTC)",
                          token.position) from None
    _check_year(moment.year, token)
    return moment


def _date(token: Token) -> dt.date:
    match = _DATE.fullmatch(token.text)
    try:
        if match is None:
            raise ValueError(token.text)
        day = dt.date(*(int(part) for part in match.groups()))
    except ValueError:
        raise FilterError("a DATE is 'YYYY-MM-DD'", token.position) from None
    _check_year(day.year, token)
    return day


def _check_year(year: int, token: Token) -> None:
    if year < 1000:
        raise FilterError("dates and timestamps run from the year 1000 (as in MySQL)",
                          token.position)


def _describe(token: Token) -> str:
    """A token named without its value: literals can hold business values."""
    if token.kind == "end":
        return "the end of the filter"
    if token.kind in ("operator", "punctuation"):
        return f"'{token.text}'"
    if token.kind == "name" and token.text.upper() in RESERVED_WORDS | {"TIMESTAMP", "DATE"}:
        return token.text.upper()
    if token.kind == "name":
        return f"the name {token.text}"
    return {"quoted": "a quoted name", "string": "a string literal", "number": "a number",
            "business_time": BUSINESS_TIME}[token.kind]
