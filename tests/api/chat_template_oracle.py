#!/usr/bin/python3
"""tests/api/chat_template_oracle.py — regenerate tests/api/chat_template_cases.json.

Renders the reference chat templates with Jinja2 the way Hugging Face
transformers does (sandboxed environment, trim_blocks, lstrip_blocks,
raise_exception) for a set of sample conversations, and writes one case per
(template, conversation): the template text, the messages, and the rendered
text (or null when the template raises), with add_generation_prompt true
and false. test_chat_template_oracle.c renders
the same cases with api/chat_template.c and compares byte for byte.

Templates: the chat_template fields of the fixture tokenizers (llama3, qwen3,
gemma3) plus Meta's Llama 2 chat template, Mistral 7B Instruct v0.1's and
Gemma 2's.
Content arrays are passed the way vLLM does: joined with "\n" for templates
that treat content as a string, as a list of parts for gemma (which iterates).

Needs python3-jinja2 (Debian). Usage:
    /usr/bin/python3 tests/api/chat_template_oracle.py $AORTA_FIXTURES > tests/api/chat_template_cases.json
"""
import json
import sys

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

LLAMA2 = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
)

MISTRAL = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)


GEMMA2 = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)


def text(t):
    return {"type": "text", "text": t}


CONVERSATIONS = [
    [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Hello!"}],
    [{"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello! How can I help?"}, {"role": "user", "content": "Tell me a joke."}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": " Hello! \n"},
     {"role": "user", "content": "Again"}],
    [{"role": "user", "content": [text("Part one."), text(" Part two. ")]}],
    [{"role": "user", "content": "  padded \u00a0\n"}],
    [{"role": "user", "content": "\u3000\u200bx\u2029 y \t"}],
    [{"role": "system", "content": " sys \n"}, {"role": "user", "content": "q"}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "q"}],
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    [{"role": "assistant", "content": "a"}],
    [{"role": "user", "content": "a"}, {"role": "system", "content": "s"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello"},
     {"role": "user", "content": "Q"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>r</think>A"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "x</think>\n\ny</think>z"},
     {"role": "user", "content": "<tool_response>t</tool_response>"}],
    [{"role": "user", "content": "multi\nline\n\n"}, {"role": "assistant", "content": "ok"},
     {"role": "user", "content": "\u00e9\u4e2d\U0001f600"}],
]


def raise_exception(msg):
    raise TemplateError(msg)


def flatten(messages, keep_parts):
    out = []
    for m in messages:
        m = dict(m)
        if isinstance(m["content"], list) and not keep_parts:
            m["content"] = "\n".join(p["text"] for p in m["content"])
        out.append(m)
    return out


def main():
    fixtures = sys.argv[1]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    templates = []
    for name in ["llama3", "qwen3", "gemma3"]:
        with open(f"{fixtures}/tokenizers/{name}/tokenizer_config.json", encoding="utf-8") as f:
            cfg = json.load(f)
        templates.append((name, cfg["chat_template"], cfg["bos_token"] or "", cfg["eos_token"] or ""))
    templates.append(("llama2", LLAMA2, "<s>", "</s>"))
    templates.append(("mistral", MISTRAL, "<s>", "</s>"))
    templates.append(("gemma2", GEMMA2, "<bos>", "<eos>"))
    cases = []
    for name, tmpl, bos, eos in templates:
        compiled = env.from_string(tmpl)
        for conv in CONVERSATIONS:
            msgs = flatten(conv, keep_parts=(name == "gemma3"))
            for gen in (True, False):
                try:
                    rendered = compiled.render(messages=msgs, bos_token=bos, eos_token=eos,
                                               add_generation_prompt=gen)
                except TemplateError:
                    rendered = None
                cases.append({"name": name, "template": tmpl, "bos": bos, "eos": eos,
                              "add_generation_prompt": gen, "messages": conv,
                              "expected": rendered})
    json.dump(cases, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
