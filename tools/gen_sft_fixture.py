#!/usr/bin/env python3
"""Writes the fixtures of `ps_prep --format sft` (tests/tools/testdata/sft/):

  <family>/            a tiny tokenizer folder per chat-template family: the family's
                       tokenizer fixture (tests/tokenizer/testdata/) plus the added tokens
                       its template uses, tokenizer_config.json with bos/eos and the
                       template without its {% generation %} tags (qwen3: in
                       chat_template.jinja instead), generation_config.json (llama3)
  expected.json        per family and input file, each example's token ids and assistant
                       mask as transformers gives them: apply_chat_template(messages,
                       tokenize=True, return_assistant_tokens_mask=True) with the template
                       of templates/<family>.jinja ({% generation %} around what an
                       assistant turn trains on: its content and end-of-turn token)

The templates are written for these fixtures with the same Jinja constructs as the
families' real ones (whose licenses differ). tests/tools/sft_prep_test.cc checks that
ps_prep's ids and masks equal these, both with the plain template (spans found by
rendering, tools/prep/sft_encoder.h) and with the generation template.

The input files map to messages as tools/prep/sft_example.h documents; MESSAGES() below
is the same mapping.

Developer-run when the fixtures change; needs transformers (no downloads):

  source tools/python_peer_env.sh && python3 tools/gen_sft_fixture.py
"""
import json
import os
import re
import shutil

from transformers import AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZERS = os.path.join(ROOT, "tests", "tokenizer", "testdata")
OUT = os.path.join(ROOT, "tests", "tools", "testdata", "sft")
INPUTS = ["messages.jsonl", "sharegpt.jsonl", "alpaca.jsonl", "prompt_completion.jsonl"]

# family -> tokenizer fixture, added tokens (content, special), bos, eos, generation eos,
# template variables, whether the template goes to chat_template.jinja.
FAMILIES = {
    "llama3": ("llama3", [("<|start_header_id|>", True), ("<|end_header_id|>", True)], "<|begin_of_text|>",
               "<|end_of_text|>", ["<|end_of_text|>", "<|eot_id|>"], {"date_string": "01 Jan 2026"}, False),
    "qwen25": ("qwen2", [], None, "<|im_end|>", None, {}, False),
    "qwen3": ("qwen2", [("<think>", False), ("</think>", False)], None, "<|im_end|>", None, {}, True),
    "mistral": ("spm_metaspace", [("[INST]", True), ("[/INST]", True)], "<s>", "</s>", None, {}, False),
    "smollm2": ("smollm2", [], "<|im_start|>", "<|im_end|>", None, {}, False),
}

GENERATION_LINE = re.compile(r"^[ \t]*\{%-?\s*(?:end)?generation\s*-?%\}[ \t]*\n", re.M)
GENERATION_TAG = re.compile(r"\{%-?\s*(?:end)?generation\s*-?%\}")


def plain(template):
    """The template without its {% generation %} tags (lines holding only a tag go)."""
    return GENERATION_TAG.sub("", GENERATION_LINE.sub("", template))


def sharegpt_role(r):
    return {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "model": "assistant",
            "bot": "assistant", "chatgpt": "assistant"}.get(r, r)


def tools_of(line):
    """The example's tools: a list, or a string holding one (LLaMA-Factory); None."""
    tools = line.get("tools")
    return json.loads(tools) if isinstance(tools, str) else tools


def messages_of(line):
    """tools/prep/sft_example.cc's mapping, default field names."""
    if "messages" in line:
        msgs = [dict(m) for m in line["messages"]]
    elif "conversations" in line:
        msgs = [{"role": sharegpt_role(m["from"]), "content": m["value"]} for m in line["conversations"]]
    elif "instruction" in line:
        msgs = [{"role": "system", "content": line["system"]}] if line.get("system") else []
        prompt = line["instruction"] + ("\n" + line["input"] if line.get("input") else "")
        msgs += [{"role": "user", "content": prompt}, {"role": "assistant", "content": line["output"]}]
    else:
        msgs = []
        for part, role in ((line["prompt"], "user"), (line["completion"], "assistant")):
            msgs += [dict(m) for m in part] if isinstance(part, list) else [{"role": role, "content": part}]
    return msgs


def make_folder(family):
    tok_name, added, bos, eos, gen_eos, _, template_file = FAMILIES[family]
    out = os.path.join(OUT, family)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    tj = json.load(open(os.path.join(TOKENIZERS, tok_name, "tokenizer.json")))
    next_id = max([max(tj["model"]["vocab"].values())] + [a["id"] for a in tj["added_tokens"]]) + 1
    for content, special in added:
        tj["added_tokens"].append({"id": next_id, "content": content, "single_word": False, "lstrip": False,
                                   "rstrip": False, "normalized": False, "special": special})
        next_id += 1
    json.dump(tj, open(os.path.join(out, "tokenizer.json"), "w"), ensure_ascii=False, indent=1)
    template = plain(open(os.path.join(OUT, "templates", family + ".jinja")).read())
    config = {"bos_token": bos, "eos_token": eos, "tokenizer_class": "PreTrainedTokenizerFast"}
    if template_file:
        open(os.path.join(out, "chat_template.jinja"), "w").write(template)
    else:
        config["chat_template"] = template
    json.dump(config, open(os.path.join(out, "tokenizer_config.json"), "w"), ensure_ascii=False, indent=2)
    if gen_eos:
        ids = {a["content"]: a["id"] for a in tj["added_tokens"]}
        json.dump({"eos_token_id": [ids[t] for t in gen_eos]}, open(os.path.join(out, "generation_config.json"), "w"))
    return out


def expected_for(family, folder):
    variables = FAMILIES[family][5]
    tok = AutoTokenizer.from_pretrained(folder)
    with_generation = open(os.path.join(OUT, "templates", family + ".jinja")).read()
    out = {}
    for name in INPUTS:
        rows = []
        for line in open(os.path.join(OUT, name), encoding="utf-8"):
            messages = messages_of(json.loads(line))
            tools = tools_of(json.loads(line))
            r = tok.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=True,
                                        return_assistant_tokens_mask=True, chat_template=with_generation, **variables)
            text = tok.apply_chat_template(messages, tools=tools, tokenize=False, **variables)  # the plain template
            assert text == tok.apply_chat_template(messages, tools=tools, tokenize=False, chat_template=with_generation,
                                                   **variables), (family, name, "generation tags change the text")
            assert r["input_ids"] == tok(text, add_special_tokens=False)["input_ids"]
            assert any(r["assistant_masks"]), (family, name, "nothing to train on")
            rows.append({"text": text, "ids": r["input_ids"], "mask": "".join(map(str, r["assistant_masks"]))})
        out[name] = rows
    return out


def main():
    expected = {"inputs": INPUTS, "families": {}}
    for family in FAMILIES:
        folder = make_folder(family)
        expected["families"][family] = {"template_vars": FAMILIES[family][5], "examples": expected_for(family, folder)}
        n = sum(len(v) for v in expected["families"][family]["examples"].values())
        print(f"{family}: {n} examples, {sorted(os.listdir(folder))}")
    with open(os.path.join(OUT, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
