"""How a document's prompt pieces become its context: plain text, or a chat template (lm-eval 0.4.13's
--system_instruction, --apply_chat_template and --fewshot_as_multiturn; api/task.py fewshot_context, api/utils.py).

The pieces: a system text (the system instruction and the rendered description, joined with the fewshot delimiter
only when neither side has whitespace at the join), the shots (question, answer, their delimiters) and the question.
- Plain text: system text + Σ(question + target_delimiter + answer + fewshot_delimiter) + question.
- Chat template, single turn: a system message with the system text (when there is one) and one user message holding
  the plain text of the shots and the question.
- Chat template, multi-turn: the system message, then per shot a user message (the question) and an assistant
  message (the answer), then the question as the last user message; delimiters are dropped.
With a `gen_prefix` (generate_until) the text after the question is the prefix (after the target delimiter when
neither side has whitespace at the join), each shot's answer follows its own prefix, and under a chat template the
prefix is an assistant message the template continues. Otherwise the messages are rendered with the generation prompt
added; a template that refuses a system role is applied again without it, as lm-eval does. Multiple-choice continuations lose their target delimiter
under a chat template (lm-eval: the template ends the prompt).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class Shot:
    """A question, its answer ("" for the evaluated document, or a shot without one) and its `gen_prefix`."""

    question: str
    answer: str
    target_delimiter: str
    fewshot_delimiter: str
    gen_prefix: str = ""

    def text(self) -> str:
        """lm-eval's user and assistant turns as text: the target delimiter follows the question when there is an
        answer and no prefix, or a prefix that needs it; the prefix and the answer are joined by a space if needed."""
        if not self.gen_prefix:
            return self.question + self.target_delimiter + self.answer + self.fewshot_delimiter if self.answer \
                else self.question
        return self.user_text() + self.assistant_text() + (self.fewshot_delimiter if self.answer else "")

    def user_text(self) -> str:
        return self.question + (self.target_delimiter if requires_delimiter(self.question, self.gen_prefix) else "")

    def assistant_text(self) -> str:
        return maybe_delimit(self.gen_prefix, self.answer, " ")


@dataclass(frozen=True)
class PromptFormat:
    system_instruction: str | None = None
    chat_template: Callable[[Messages], str] | None = None  # renders messages, generation prompt added
    fewshot_as_multiturn: bool = False
    label: str = ""  # what the baseline provenance records of it (part of the scoring protocol); "" for plain text

    def context(self, description: str, shots: Sequence[Shot], question: Shot, fewshot_delimiter: str) -> str:
        """`question`: the evaluated document as a Shot without an answer (its gen_prefix starts the answer)."""
        system = maybe_delimit(self.system_instruction, description, fewshot_delimiter)
        if self.chat_template is None:
            return system + "".join(shot.text() for shot in shots) + question.text()
        messages = [{"role": "system", "content": system}] if system else []
        if self.fewshot_as_multiturn:
            for shot in shots:
                messages.append({"role": "user", "content": shot.question})
                if shot.answer or shot.gen_prefix:
                    messages.append({"role": "assistant", "content": shot.assistant_text()})
            messages.append({"role": "user", "content": question.question})
        else:
            messages.append({"role": "user", "content": "".join(shot.text() for shot in shots) + question.question})
        if question.gen_prefix:  # the template continues this assistant message instead of opening a new one
            messages.append({"role": "assistant", "content": question.gen_prefix})
        return self.chat_template(messages)

    def continuation_delimiter(self, target_delimiter: str) -> str:
        return "" if self.chat_template is not None else target_delimiter


PLAIN_TEXT = PromptFormat()


def requires_delimiter(prefix: str, suffix: str) -> bool:
    """Neither side has whitespace at the join (an empty prefix needs none; lm-eval's api/utils.py rule)."""
    if not prefix:
        return False
    return not (prefix[-1].isspace() or suffix[0].isspace())


def maybe_delimit(prefix: str | None, suffix: str | None, delimiter: str) -> str:
    """prefix + delimiter + suffix, without the delimiter when either side has whitespace at the join."""
    if not prefix:
        return suffix or ""
    if not suffix:
        return prefix
    if prefix[-1].isspace() or suffix[0].isspace():
        return prefix + suffix
    return prefix + delimiter + suffix


def prompt_format(tokenizer, apply_chat_template: bool, system_instruction: str | None,
                  fewshot_as_multiturn: bool) -> PromptFormat:
    """The format the options ask for; `label` names the template and instruction by digest, so that a baseline
    built with another prompt format (or none) is never compared with this run."""
    parts = []
    if system_instruction:
        parts.append(f"system_instruction={_digest(system_instruction)}")
    if not apply_chat_template:
        return PromptFormat(system_instruction, label="; ".join(parts))
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        from pytest_modelbench.errors import ModelLoadError

        raise ModelLoadError("--apply-chat-template: the model's tokenizer has no chat template")
    parts.append(f"chat_template={_digest(str(template))}")
    if fewshot_as_multiturn:
        parts.append("fewshot_as_multiturn")
    return PromptFormat(system_instruction, tokenizer_chat_template(tokenizer), fewshot_as_multiturn, "; ".join(parts))


def _digest(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def tokenizer_chat_template(tokenizer) -> Callable[[Messages], str]:
    """The tokenizer's chat template with the generation prompt; without the system message if it refuses one."""
    import jinja2

    def render(messages: Messages) -> str:
        prefilled = messages[-1]["role"] == "assistant"  # a gen_prefix: continue it, open no new turn
        options = dict(tokenize=False, add_generation_prompt=not prefilled, continue_final_message=prefilled)
        try:
            return tokenizer.apply_chat_template(messages, **options)
        except jinja2.exceptions.TemplateError:
            without_system = [message for message in messages if message["role"] != "system"]
            return tokenizer.apply_chat_template(without_system, **options)

    return render
