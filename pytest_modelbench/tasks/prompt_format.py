"""How a document's prompt pieces become its context: plain text, or a chat template (lm-eval 0.4.13's
--system_instruction, --apply_chat_template and --fewshot_as_multiturn; api/task.py fewshot_context, api/utils.py).

The pieces: a system text (the system instruction and the rendered description, joined with the fewshot delimiter
only when neither side has whitespace at the join), the shots (question, answer, their delimiters) and the question.
- Plain text: system text + Σ(question + target_delimiter + answer + fewshot_delimiter) + question.
- Chat template, single turn: a system message with the system text (when there is one) and one user message holding
  the plain text of the shots and the question.
- Chat template, multi-turn: the system message, then per shot a user message (the question) and an assistant
  message (the answer), then the question as the last user message; delimiters are dropped.
The messages are rendered by the tokenizer's template with the generation prompt added; a template that refuses a
system role is applied again without it, as lm-eval does. Multiple-choice continuations lose their target delimiter
under a chat template (lm-eval: the template ends the prompt).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class Shot:
    question: str
    answer: str  # "" when the shot has no answer: then only its question is shown
    target_delimiter: str
    fewshot_delimiter: str

    def text(self) -> str:
        if not self.answer:
            return self.question
        return self.question + self.target_delimiter + self.answer + self.fewshot_delimiter


@dataclass(frozen=True)
class PromptFormat:
    system_instruction: str | None = None
    chat_template: Callable[[Messages], str] | None = None  # renders messages, generation prompt added
    fewshot_as_multiturn: bool = False
    label: str = ""  # what the baseline provenance records of it (part of the scoring protocol); "" for plain text

    def context(self, description: str, shots: Sequence[Shot], question: str, fewshot_delimiter: str) -> str:
        system = maybe_delimit(self.system_instruction, description, fewshot_delimiter)
        if self.chat_template is None:
            return system + "".join(shot.text() for shot in shots) + question
        messages = [{"role": "system", "content": system}] if system else []
        if self.fewshot_as_multiturn:
            for shot in shots:
                messages.append({"role": "user", "content": shot.question})
                if shot.answer:
                    messages.append({"role": "assistant", "content": shot.answer})
            messages.append({"role": "user", "content": question})
        else:
            messages.append({"role": "user", "content": "".join(shot.text() for shot in shots) + question})
        return self.chat_template(messages)

    def continuation_delimiter(self, target_delimiter: str) -> str:
        return "" if self.chat_template is not None else target_delimiter


PLAIN_TEXT = PromptFormat()


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
        try:
            return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                 continue_final_message=False)
        except jinja2.exceptions.TemplateError:
            without_system = [message for message in messages if message["role"] != "system"]
            return tokenizer.apply_chat_template(without_system, tokenize=False, add_generation_prompt=True,
                                                 continue_final_message=False)

    return render
