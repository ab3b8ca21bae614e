#!/usr/bin/python3
"""Independent checker for json_schema_validity_test (Debian's python3 + python3-jsonschema).

  json_schema_check.py schema SCHEMA_FILE SAMPLES_FILE
      Each line of SAMPLES_FILE is one document, hex-encoded bytes. Prints one line per
      document: "ok", or "FAIL <reason>" when it is not UTF-8, not strict JSON, or not
      valid against the schema (formats checked).
  json_schema_check.py regex PATTERN_FILE SAMPLES_FILE
      Prints "1" / "0" per line: re.fullmatch(pattern, text).

jsonschema checks date-time / time only with the rfc3339-validator package, which Debian
does not ship, so those two formats are checked here: RFC 3339's shape by regex, then
datetime.fromisoformat for the calendar and clock ranges.
"""
import binascii
import datetime
import json
import re
import sys

import jsonschema

_TIME = r"([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)"
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]" + _TIME, re.ASCII)
_TIME_RE = re.compile(_TIME, re.ASCII)


def _fromiso(text):
    # Python 3.11 takes "Z" but at most 6 fraction digits; trim the rest (RFC 3339
    # allows any number).
    text = re.sub(r"(\.\d{6})\d+", r"\1", text.upper())
    return datetime.datetime.fromisoformat(text)


def format_checker():
    checker = jsonschema.FormatChecker()

    @checker.checks("date-time", raises=ValueError)
    def _date_time(value):
        if not isinstance(value, str):
            return True
        return bool(_DATE_TIME.fullmatch(value)) and _fromiso(value) is not None

    @checker.checks("time", raises=ValueError)
    def _time(value):
        if not isinstance(value, str):
            return True
        return bool(_TIME_RE.fullmatch(value)) and _fromiso("1970-01-01T" + value) is not None

    return checker


def _reject_constant(name):
    raise ValueError("non-JSON constant " + name)


def check_schema(schema_file, samples_file):
    with open(schema_file, encoding="utf-8") as f:
        schema = json.load(f)
    cls = jsonschema.validators.validator_for(schema)
    validator = cls(schema, format_checker=format_checker())
    out = []
    with open(samples_file, encoding="ascii") as f:
        for line in f:
            raw = binascii.unhexlify(line.strip())
            try:
                text = raw.decode("utf-8")
                doc = json.loads(text, parse_constant=_reject_constant)
            except ValueError as e:
                out.append("FAIL not JSON: %s" % str(e).replace("\n", " "))
                continue
            errors = list(validator.iter_errors(doc))
            if errors:
                out.append("FAIL " + errors[0].message.replace("\n", " ")[:300])
            else:
                out.append("ok")
    print("\n".join(out))


def check_regex(pattern_file, samples_file):
    with open(pattern_file, encoding="utf-8") as f:
        pattern = re.compile(f.read())
    out = []
    with open(samples_file, encoding="ascii") as f:
        for line in f:
            text = binascii.unhexlify(line.strip()).decode("utf-8")
            out.append("1" if pattern.fullmatch(text) else "0")
    print("\n".join(out))


if __name__ == "__main__":
    if sys.argv[1] == "schema":
        check_schema(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "regex":
        check_regex(sys.argv[2], sys.argv[3])
    else:
        sys.exit("usage: json_schema_check.py schema|regex FILE SAMPLES")
