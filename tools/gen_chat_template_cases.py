#!/usr/bin/env python3
"""Writes tests/chat/testdata/template_cases.json: small Jinja templates, each with a
context and the text transformers renders (its own Jinja environment for chat templates:
trim_blocks, lstrip_blocks, loop controls, raise_exception, tojson, namespace,
{% generation %}), for tests/chat/template_test.cc. One case per construct the C++ engine
(chat/template.h) supports, plus whitespace-control corner cases.

Developer-run when the cases change; needs transformers (source tools/python_peer_env.sh):

  python3 tools/gen_chat_template_cases.py
"""
import json
import os

from transformers.utils.chat_template_utils import _compile_jinja_template

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "chat", "testdata", "template_cases.json")

MSGS = [
    {"role": "system", "content": "  Be brief.\n"},
    {"role": "user", "content": "Hi <there>, \"you\"\n"},
    {"role": "assistant", "content": "<think>\nplan\n</think>\n\nHello!"},
    {"role": "user", "content": "Ça va? 日本"},
]

CASES = [
    # (name, template, context)
    ("text", "hello world\n", {}),
    ("output_types", "{{ 1 }}|{{ 1.5 }}|{{ 2.0 }}|{{ true }}|{{ none }}|{{ 'a' }}|{{ x }}|{{ [1, 'b'] }}|{{ {'k': 1} }}", {}),
    ("arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 - 4 }} {{ 'ab' * 3 }} {{ 1e20 }} {{ 0.1 + 0.2 }}", {}),
    ("concat", "{{ 'a' ~ 1 ~ none ~ x }}{{ 'x' + 'y' }}{{ [1] + [2] }}", {}),
    ("compare", "{{ 1 == 1.0 }}{{ 'a' != 'b' }}{{ 2 < 3 }}{{ 'b' >= 'a' }}{{ 'ell' in 'hello' }}{{ 3 not in [1, 2] }}{{ 'k' in {'k': 1} }}", {}),
    ("logic", "{{ true and 'x' }}|{{ false or 'y' }}|{{ not none }}|{{ none or [] }}|{{ 0 and 1 }}", {}),
    ("cond_expr", "{{ 'a' if x else 'b' }}{{ 'c' if true }}|{{ 'd' if false }}|", {"x": 0}),
    ("if_elif_else", "{% for i in [1, 2, 3] %}{% if i == 1 %}one{% elif i == 2 %}two{% else %}many{% endif %}{% endfor %}", {}),
    ("for_loop_vars", "{% for m in messages %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }};{% endfor %}", {"messages": MSGS}),
    ("for_filter", "{% for m in messages if m.role != 'system' %}{{ loop.index0 }}:{{ m.role }}{{ ',' if not loop.last }}{% endfor %}", {"messages": MSGS}),
    ("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}{% for x in none_list %}y{% else %}none{% endfor %}", {}),
    ("for_unpack", "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }} {% endfor %}{% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}", {"d": {"z": 0, "y": [1]}}),
    ("for_dict_keys", "{% for k in d %}{{ k }}{% endfor %}", {"d": {"b": 1, "a": 2}}),
    ("break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("set_scope", "{% set x = 1 %}{% for i in [1, 2] %}{% set x = i * 10 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("namespace", "{% set ns = namespace(found=false, n=0) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.found = true %}{% set ns.n = ns.n + 1 %}{% endif %}{% endfor %}{{ ns.found }}{{ ns.n }}", {"messages": MSGS}),
    ("namespace_last_query", "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}{%- if ns.multi_step_tool and message.role == 'user' and not message.content.startswith('<tool_response>') %}{%- set ns.multi_step_tool = false %}{%- set ns.last_query_index = index %}{%- endif %}{%- endfor %}{{ ns.last_query_index }}", {"messages": MSGS}),
    ("set_per_iteration", "{% for i in [1, 2] %}{% if i == 2 %}[{{ x }}]{% endif %}{% set x = i %}{% endfor %}{% set x = 5 %}{% for i in [1, 2] %}[{{ x }}]{% set x = i %}{% endfor %}[{{ x }}]", {}),
    ("generation_scope", "{% for i in [1, 2] %}{% generation %}{% set y = i %}{{ y }}{% endgeneration %}[{{ y }}]{% endfor %}", {}),
    ("set_block", "{% set s %}a{{ 1 + 1 }}b{% endset %}[{{ s }}]", {}),
    ("set_tuple", "{% set a, b = [1, 2] %}{{ b }}{{ a }}", {}),
    ("subscripts", "{{ messages[0]['role'] }}{{ messages[-1].role }}{{ messages[1:] | length }}{{ messages[:1][0].role }}{{ messages[::-1][0].role }}{{ 'hello'[1:3] }}{{ 'hello'[-1] }}{{ '日本語'[1] }}{{ messages[9] is defined }}", {"messages": MSGS}),
    ("attr_missing", "{{ messages[0].nope is defined }}{{ messages[0].tool_calls is not defined }}{{ messages[0]['nope'] }}", {"messages": MSGS}),
    ("tests", "{{ x is none }}{{ 's' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 1 is number }}{{ 1 is integer }}{{ 1.0 is float }}{{ false is boolean }}{{ true is true }}{{ false is false }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby(3) }}{{ 'a' is equalto('a') }}{{ y is undefined }}{{ 'ab' is lower }}{{ 1 is in [1] }}{{ 'x' is sequence }}", {"x": None}),
    ("filters_str", "{{ '  a b  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'aBc' | upper }}{{ 'aBc' | lower }}|{{ 'hello world' | capitalize }}|{{ 'hello world' | title }}|{{ 'aaa' | replace('a', 'b') }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 5 | string }}{{ x | default('dflt') }}{{ '' | default('e', true) }}{{ none | default('n') }}", {}),
    ("filters_seq", "{{ [3, 1, 2] | first }}{{ [3, 1, 2] | last }}{{ 'abc' | first }}{{ [1, 2, 3] | join(', ') }}{{ messages | map(attribute='role') | join('/') }}{{ 'abc' | length }}{{ '日本' | length }}{{ {'a': 1} | length }}{{ [1, 2] | reverse | list }}{{ 'abc' | list }}{{ '3' | int + 1 }}{{ 'x' | int }}{{ -3 | abs }}{{ 2.567 | round(1) }}{{ 3 | float }}", {"messages": MSGS}),
    ("selectattr", "{{ messages | selectattr('role', 'equalto', 'user') | list | length }}{{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='role') | join(',') }}{{ messages | selectattr('content') | list | length }}", {"messages": MSGS}),
    ("select_reject", "{{ ['a', 'code_interpreter', 'b'] | reject('equalto', 'code_interpreter') | join(', ') }}|{{ [0, 1, 2, 3] | select | list }}|{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [3, 1, 2] | sort | list }}{{ [3, 1, 2] | sort(reverse=true) | list }}{{ messages | sort(attribute='role') | map(attribute='role') | join(',') }}|{{ [1, 2, 1, 3] | unique | list }}{{ [3, 1, 2] | min }}{{ [3, 1, 2] | max }}{{ [1, 2, 3] | sum }}{{ [1.5, 2] | sum }}", {"messages": MSGS}),
    ("tojson", "{{ messages[0] | tojson }}|{{ {'a': [1, 2.5, true, none], 'é': 'x\"\\n'} | tojson }}|{{ {'a': [1, {'b': []}], 'c': {}} | tojson(indent=2) }}|{{ 'ü' | tojson }}", {"messages": MSGS}),
    ("string_methods", "{{ '  a  '.strip() }}|{{ 'xxayy'.strip('xy') }}|{{ '\\n\\na\\n'.lstrip('\\n') }}|{{ 'a  '.rstrip() }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'bc')) }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'aXbX'.replace('X', '-') }}|{{ 'ab'.upper() }}{{ 'AB'.lower() }}|{{ 'hello'.find('l') }}|{{ '-'.join(['a', 'b']) }}", {}),
    ("think_split", "{%- set content = messages[2].content %}{%- if '</think>' in content %}{%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}[{{ reasoning_content }}][{{ content }}]", {"messages": MSGS}),
    ("dict_methods", "{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 5) }}{{ d.keys() | list }}{{ d.values() | list }}{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}", {"d": {"a": 1, "b": [2]}}),
    ("dict_literal_eq", "{{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }}{{ messages[1] == messages[1] }}{{ messages[1] == messages[3] }}", {"messages": MSGS}),
    ("strings_escapes", "{{ 'a\\tb' }}|{{ \"it's\" }}|{{ 'q\\'q' }}|{{ '\\u00e9' }}|{{ 'a' 'b' }}", {}),
    ("whitespace_dash", "a  \n  {%- if true -%}  \n  b  \n  {%- endif -%}\n  c {{- ' d ' -}} e", {}),
    ("trim_blocks", "{% if true %}\nline1\n{% endif %}\nline2\n{# comment #}\nline3\n{{ 'x' }}\nline4", {}),
    ("lstrip_blocks", "  {% if true %}\n    indented\n    {% endif %}\n  {{ 'kept' }}\n\t{# c #}\nend", {}),
    ("plus_sign", "a\n  {%+ if true +%}\nb{% endif %}", {}),
    ("comment_dash", "x  {#- comment -#}   y", {}),
    ("trailing_newline", "{% for i in [1, 2] %}\n{{ i }}\n{% endfor %}\n", {}),
    ("crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n", {}),
    ("generation", "{% for m in messages %}{{ m.role }}:{% if m.role == 'assistant' %}{% generation %}{{ m.content }}<end>{% endgeneration %}{% else %}{{ m.content }}{% endif %}\n{% endfor %}", {"messages": MSGS}),
    ("globals", "{{ raise_exception is defined }}{{ strftime_now is defined }}{{ range(3) | list }}{{ range(1, 7, 2) | list }}{{ dict(a=1) | tojson }}", {}),
    ("messages_loop_prev", "{% for m in messages %}{% if not loop.first %}{{ messages[loop.index0 - 1].role }}>{% endif %}{{ m.role }} {% endfor %}", {"messages": MSGS}),
    ("filter_precedence", "{{ 'a' ~ ' b ' | trim }}|{{ -1 | abs }}|{{ messages | length - 1 }}|{{ not messages | length }}", {"messages": MSGS}),
    ("bos", "{{- bos_token }}{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] | trim }}{%- endif %}", {"messages": MSGS, "bos_token": "<s>"}),
]


# The family templates of the sft fixtures (tests/tools/testdata/sft/templates/) with
# tools, tool calls, a generation prompt and template variables: the branches the sft
# fixtures' conversations do not reach. A template that raises records the message.
TEMPLATES = os.path.join(ROOT, "tests", "tools", "testdata", "sft", "templates")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
TOOL_CHAT = [
    {"role": "system", "content": "You can call tools."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "id": "call_1234", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "{\"temp_c\": 21.5}"},
    {"role": "tool", "content": "sunny"},
    {"role": "assistant", "content": "21.5 °C and sunny."},
    {"role": "user", "content": "Thanks"},
]
FAMILY_CONTEXTS = [
    ("tools", {"messages": TOOL_CHAT, "tools": TOOLS, "add_generation_prompt": True}),
    ("no_tools_prompt", {"messages": TOOL_CHAT[:2], "tools": None, "add_generation_prompt": True,
                         "enable_thinking": False, "date_string": "02 Feb 2026", "custom_tools": None}),
    ("bad_roles", {"messages": [{"role": "assistant", "content": "x"}, {"role": "assistant", "content": "y"}],
                   "tools": None}),
]


def family_cases():
    for file in sorted(os.listdir(TEMPLATES)):
        template = open(os.path.join(TEMPLATES, file)).read()
        for name, context in FAMILY_CONTEXTS:
            yield ("family_" + file.split(".")[0] + "_" + name, template,
                   dict(context, bos_token="<s>", eos_token="</s>"))


def main():
    out = []
    for name, template, context in CASES + list(family_cases()):
        compiled = _compile_jinja_template(template)
        try:
            text = compiled.render(**context)
            out.append({"name": name, "template": template, "context": context, "expected": text})
        except Exception as e:  # raise_exception: the template's own message
            out.append({"name": name, "template": template, "context": context, "error": str(e)})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: {len(out)} cases")


if __name__ == "__main__":
    main()
