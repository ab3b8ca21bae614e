#!/usr/bin/python3
"""Conformance of `pagoda chat-template` with the reference renderer.

The reference is what Hugging Face transformers' apply_chat_template does:
Debian's python3-jinja2 with ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True, extensions=[loopcontrols]), a tojson filter that is
json.dumps(ensure_ascii=False, ...), and globals raise_exception / strftime_now.

Every *.jinja under --templates is rendered for a set of conversations by both;
a case passes when the outputs are byte-identical or both raise. strftime_now is
made deterministic on both sides: the reference formats a fixed date and pagoda
gets the same date through PAGODA_FIXED_DATE.

Usage: chat_template_conformance_test.py --pagoda PATH --templates DIR [--verbose]
Exit status 0 when every template is identical / both-raise for every case.
"""
import argparse
import datetime
import glob
import json
import os
import subprocess
import sys
import tempfile

import jinja2
import jinja2.ext
import jinja2.sandbox

FIXED_DATE = datetime.datetime(2026, 1, 15)

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "description": "City name"},
                                      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                                      "days": {"type": "integer", "description": "Forecast days"}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {"type": "object",
                       "properties": {"query": {"type": "string"}, "limit": {"type": "number"}},
                       "required": ["query"]}}},
]


def tool_convo(arguments):
    return [
        {"role": "system", "content": "You are a helpful assistant with tools."},
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"id": "abc123def", "type": "function",
                         "function": {"name": "get_weather", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "abc123def", "name": "get_weather",
         "content": "{\"temperature\": 21.5, \"condition\": \"sunny\"}"},
        {"role": "assistant", "content": "It is sunny and 21.5 °C in Paris."},
        {"role": "user", "content": "Thanks!"},
    ]


CASES = [
    ("system_user", {"messages": [{"role": "system", "content": "You are a helpful assistant."},
                                  {"role": "user", "content": "Hello!"}]}, True),
    ("system_user_nogen", {"messages": [{"role": "system", "content": "You are a helpful assistant."},
                                        {"role": "user", "content": "Hello!"}]}, False),
    ("multi_turn", {"messages": [{"role": "user", "content": "Hi, who are you?"},
                                 {"role": "assistant", "content": "I am an assistant."},
                                 {"role": "user", "content": "Tell me a joke."}]}, True),
    ("multi_turn_nogen", {"messages": [{"role": "system", "content": "Be brief."},
                                       {"role": "user", "content": "Hi"},
                                       {"role": "assistant", "content": "Hello! How can I help?"}]}, False),
    ("unicode_quotes", {"messages": [{"role": "user", "content":
                                      "Say \"hi\" and 'bye' — naïve café 你好 🙂 \\n back\\slash\n  new line\t tab"}]}, True),
    ("tools_object_args", {"messages": tool_convo({"city": "Paris", "unit": "celsius", "days": 2}),
                           "tools": TOOLS}, True),
    ("tools_string_args", {"messages": tool_convo("{\"city\": \"Paris\", \"unit\": \"celsius\"}"),
                           "tools": TOOLS}, True),
    ("tools_null_content", {"messages": [dict(m, content=None) if m.get("tool_calls") else m
                                         for m in tool_convo({"city": "Paris"})], "tools": TOOLS}, False),
    ("content_parts", {"messages": [{"role": "system", "content": [{"type": "text", "text": "Be nice."}]},
                                    {"role": "user", "content": [{"type": "text", "text": "Hello"},
                                                                 {"type": "text", "text": "again"}]}]}, True),
    ("reasoning", {"messages": [{"role": "user", "content": "2+2?"},
                                {"role": "assistant", "content": "<think>\nadd\n</think>\n\n4",
                                 "reasoning_content": "add"},
                                {"role": "user", "content": "3+3?"}]}, True),
    ("tools_defined_only", {"messages": [{"role": "user", "content": "Search for jinja."}],
                            "tools": TOOLS}, True),
]


def make_env():
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def strftime_now(fmt):
        return FIXED_DATE.strftime(fmt)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_reference(env, source, convo, add_generation_prompt):
    try:
        tmpl = env.from_string(source)
        kwargs = {"messages": convo["messages"], "add_generation_prompt": add_generation_prompt,
                  "bos_token": "<s>", "eos_token": "</s>"}
        if "tools" in convo:
            kwargs["tools"] = convo["tools"]
        return True, tmpl.render(**kwargs)
    except Exception as e:  # noqa: BLE001 - any failure is "raises"
        return False, f"{type(e).__name__}: {e}"


def render_pagoda(pagoda, template_path, convo_path, add_generation_prompt):
    cmd = [pagoda, "chat-template", "--template", template_path, "--messages", convo_path,
           "--bos-token", "<s>", "--eos-token", "</s>"]
    if add_generation_prompt:
        cmd.append("--add-generation-prompt")
    env = dict(os.environ, PAGODA_FIXED_DATE=FIXED_DATE.strftime("%Y-%m-%d"))
    p = subprocess.run(cmd, capture_output=True, env=env, timeout=60)
    if p.returncode == 0:
        return True, p.stdout.decode("utf-8")
    return False, p.stderr.decode("utf-8", "replace").strip()


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pagoda", required=True)
    ap.add_argument("--templates", required=True)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--only", default="", help="substring of template names to run")
    args = ap.parse_args()

    env = make_env()
    templates = sorted(glob.glob(os.path.join(args.templates, "*.jinja")))
    templates = [t for t in templates if args.only in os.path.basename(t)]
    if not templates:
        print("no templates found", file=sys.stderr)
        return 1
    counts = {"identical": 0, "both-raise": 0, "mismatch": 0, "pagoda-unsupported": 0}
    per_template = {}
    with tempfile.TemporaryDirectory() as tmp:
        convo_paths = {}
        for name, convo, _ in CASES:
            path = os.path.join(tmp, name + ".json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(convo, f, ensure_ascii=False)
            convo_paths[name] = path
        for tpath in templates:
            tname = os.path.basename(tpath)
            with open(tpath, encoding="utf-8") as f:
                source = f.read()
            results = []
            for name, convo, agp in CASES:
                ok_ref, out_ref = render_reference(env, source, convo, agp)
                ok_pg, out_pg = render_pagoda(args.pagoda, tpath, convo_paths[name], agp)
                if ok_ref and ok_pg and out_ref == out_pg:
                    status = "identical"
                elif not ok_ref and not ok_pg:
                    status = "both-raise"
                elif ok_ref and not ok_pg and "unsupported" in out_pg:
                    status = "pagoda-unsupported"
                else:
                    status = "mismatch"
                counts[status] += 1
                results.append((name, status))
                if status != "identical" and (args.verbose or status == "mismatch"):
                    print(f"  {tname} / {name}: {status}")
                    if status == "mismatch" and ok_ref and ok_pg:
                        i = first_diff(out_ref, out_pg)
                        print(f"    first difference at char {i}:")
                        print(f"    reference: {out_ref[max(0, i - 60):i + 60]!r}")
                        print(f"    pagoda:    {out_pg[max(0, i - 60):i + 60]!r}")
                    else:
                        print(f"    reference: {'ok' if ok_ref else out_ref[:300]}")
                        print(f"    pagoda:    {'ok' if ok_pg else out_pg[:300]}")
            per_template[tname] = results
    print(f"{'template':60s} identical both-raise mismatch unsupported")
    for tname, results in per_template.items():
        c = {k: sum(1 for _, s in results if s == k) for k in counts}
        print(f"{tname:60s} {c['identical']:9d} {c['both-raise']:10d} {c['mismatch']:8d} {c['pagoda-unsupported']:11d}")
    print(f"cases: {counts}  ({len(templates)} templates x {len(CASES)} conversations)")
    return 0 if counts["mismatch"] == 0 and counts["pagoda-unsupported"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
