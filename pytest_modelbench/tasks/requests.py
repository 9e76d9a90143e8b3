"""Documents → few-shot contexts and (context, continuation) requests, exactly as lm-eval 0.4.13 builds them; and
each document's key, what pairs it with a baseline's document."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import random
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from pytest_modelbench.errors import DocumentError
from pytest_modelbench.tasks.config import TaskConfig
from pytest_modelbench.tasks.prompt_format import PLAIN_TEXT, PromptFormat, Shot
from pytest_modelbench.tasks.templates import DocResolver, render

FEWSHOT_SEED = 1234


@dataclass(frozen=True)
class DocumentRequests:
    """One evaluated document: its shared context and one continuation per choice. No continuations for a
    generate_until task (`gold` is the reference text, a tuple of texts when several are accepted) nor for a
    loglikelihood_rolling one (`gold` is the text whose log-likelihood is scored, the context is empty); a
    loglikelihood task's one continuation is its target text (also `gold`), and it has no choices."""

    doc_id: int
    context: str
    choices: tuple[str, ...]
    continuations: tuple[str, ...]
    gold: int | tuple[int, ...] | str | tuple[str, ...]
    category: str | None
    doc: Mapping[str, Any]
    cluster: str | None = None  # the task's `modelbench.gate.cluster` for this document (gate/pooled.py)
    # k for the k-th exact repeat of a document among its task's documents (`numbered`), or group's (`numbered_after`)
    occurrence: int = 1

    @functools.cached_property  # asked for every pairing, under every key; the fields it hashes never change
    def digest(self) -> str:
        return document_hash(self.context, self.continuations, self.gold)

    @property
    def key(self) -> str:
        """What pairs the document with a baseline's (`document_key`)."""
        return document_key(self.digest, self.occurrence)

    def numbered_after(self, copies_before: Mapping[str, int]) -> DocumentRequests:
        """The document numbered over a longer list that holds `copies_before` copies of each document (by digest)
        ahead of its task's documents (a group's leaf tasks before its own)."""
        return dataclasses.replace(self, occurrence=copies_before.get(self.digest, 0) + self.occurrence)


def document_key(digest: str, occurrence: int) -> str:
    """What pairs a document with a baseline's: its digest, with the suffix ``#k`` for a k-th repeat (k ≥ 2)."""
    return digest if occurrence == 1 else f"{digest}#{occurrence}"


def document_hash(context: str, continuations: Sequence[str], gold: Any) -> str:
    """Stable identity of a scored document: what the model sees and what is scored (16 hex digits of sha256)."""
    digest = hashlib.sha256()
    digest.update(context.encode("utf-8"))
    digest.update(b"\x00")
    for continuation in continuations:
        digest.update(continuation.encode("utf-8"))
        digest.update(b"\x1f")
    digest.update(repr(gold).encode("utf-8"))
    return digest.hexdigest()[:16]


def numbered(documents: Sequence[DocumentRequests]) -> list[DocumentRequests]:
    """The documents with each exact repeat numbered (`occurrence`) over all of them. Given a task's whole list, before
    anything is scored, so that a document's key never depends on which documents were scored, or in which block."""
    seen: dict[str, int] = {}
    result = []
    for document in documents:
        digest = document.digest
        seen[digest] = seen.get(digest, 0) + 1
        result.append(dataclasses.replace(document, occurrence=seen[digest]))
    return result


def key_digest(key: str) -> str:
    """The digest a document's key was made of."""
    return key.partition("#")[0]


def key_numbered_after(key: str, copies_before: Mapping[str, int]) -> str:
    """A document's key as `DocumentRequests.numbered_after` numbers it, from the key alone (a document unscored)."""
    digest, _, occurrence = key.partition("#")
    return document_key(digest, copies_before.get(digest, 0) + int(occurrence or 1))


class FewshotSampler:
    """lm-eval's samplers: `default` draws with one Random(1234) per task in document order; `first_n` slices."""

    def __init__(self, pool: Sequence[Mapping[str, Any]], method: str, exclude_eval_doc: bool):
        self.pool = list(pool)
        self.method = method
        self.exclude_eval_doc = exclude_eval_doc
        self.rnd = random.Random(FEWSHOT_SEED)

    def shots(self, doc: Mapping[str, Any], n: int) -> list[Mapping[str, Any]]:
        if n == 0:
            return []
        if self.method == "first_n":
            pool = [shot for shot in self.pool if shot != doc] if self.exclude_eval_doc else self.pool
            return pool[:n]
        if not self.exclude_eval_doc:
            return self.rnd.sample(self.pool, n)
        drawn = [shot for shot in self.rnd.sample(self.pool, n + 1) if shot != doc][:n]
        if len(drawn) < n:  # the pool holds copies of the evaluated document: draw again without any of them
            drawn = self.rnd.sample([shot for shot in self.pool if shot != doc], n)
        return drawn


class RequestBuilder:
    def __init__(self, config: TaskConfig, field_names: set[str], prompt_format: PromptFormat = PLAIN_TEXT):
        self.config = config
        self.prompt_format = prompt_format
        self.resolver = DocResolver(field_names, has_choices=config.doc_to_choice is not None)
        overrides = config.fewshot_overrides
        self.shot_text = overrides.get("doc_to_text", config.doc_to_text)
        self.shot_target = overrides.get("doc_to_target", config.doc_to_target)
        self.shot_choice = overrides.get("doc_to_choice", config.doc_to_choice)
        self.shot_target_delimiter = overrides.get("target_delimiter", config.target_delimiter)
        self.shot_fewshot_delimiter = overrides.get("fewshot_delimiter", config.fewshot_delimiter)
        self.shot_gen_prefix = overrides.get("gen_prefix", config.gen_prefix)

    def where(self, doc_id: int | str) -> str:
        return f"{self.config.source}: task '{self.config.task}', document {doc_id}"

    def build(self, doc_id: int, doc: Mapping[str, Any], shots: Sequence[Mapping[str, Any]]) -> DocumentRequests:
        config, where = self.config, self.where(doc_id)
        if config.output_type == "loglikelihood_rolling":  # lm-eval scores the target text alone: no prompt
            text = self.resolver.target(config.doc_to_target, doc, where)
            if not isinstance(text, str):
                raise DocumentError(f"{where}: a loglikelihood_rolling target must be text, got {text!r}")
            return DocumentRequests(doc_id, "", (), (), text, self._category(doc, where), doc)
        question = Shot(self.resolver.text(config.doc_to_text, doc, where), "", config.target_delimiter, "",
                        self._field_or_template(config.gen_prefix, doc, where))
        context = self.prompt_format.context(
            self._field_or_template(config.description, doc, where),
            [self._shot(shot, f"{where} (few-shot example)") for shot in shots], question, config.fewshot_delimiter,
        )
        target = self.resolver.target(config.doc_to_target, doc, where)
        if config.output_type == "generate_until":
            return DocumentRequests(doc_id, context, (), (), self._reference(target, doc, where),
                                    self._category(doc, where), doc)
        if config.output_type == "loglikelihood":  # lm-eval: the target as it is, no target_delimiter before it
            if not isinstance(target, str):
                raise DocumentError(f"{where}: a loglikelihood target must be text, got {target!r}")
            return DocumentRequests(doc_id, context, (), (target,), target, self._category(doc, where), doc)
        choices = self.resolver.choices(config.doc_to_choice, doc, where)
        return DocumentRequests(
            doc_id=doc_id,
            context=context,
            choices=tuple(choices),
            continuations=tuple(self.prompt_format.continuation_delimiter(config.target_delimiter) + choice
                                for choice in choices),
            gold=self._gold(target, choices, where),
            category=self._category(doc, where),
            doc=doc,
        )

    def _reference(self, target: Any, doc: Mapping[str, Any], where: str) -> str | tuple[str, ...]:
        """What a generation is scored against (lm-eval): with doc_to_choice the target indexes the choices; a list
        is several references (any one matches); anything else as text."""
        if self.config.doc_to_choice is not None:
            choices = self.resolver.choices(self.config.doc_to_choice, doc, where)
            if isinstance(target, (list, str)):
                raise DocumentError(f"{where}: with doc_to_choice the target must be a choice index, got {target!r}")
            return choices[self._gold(target, choices, where)]
        if isinstance(target, list):
            return tuple(str(reference) for reference in target)
        return str(target)

    def clustered(self, request: DocumentRequests) -> DocumentRequests:
        """The document with its cluster, where the task declares `modelbench.gate.cluster` (a field or a template,
        as doc_to_text): documents of one cluster are related evidence, pooled across tasks by the same id."""
        spec = self.config.gate.cluster
        if spec is None:
            return request
        where = self.where(request.doc_id)
        cluster = self._field_or_template(spec, request.doc, where)
        if not cluster:
            raise DocumentError(f"{where}: its cluster is empty (modelbench.gate.cluster: {spec!r}); name a field or "
                                "write a template that every document fills")
        return dataclasses.replace(request, cluster=cluster)

    def _field_or_template(self, spec: str | None, doc: Mapping[str, Any], where: str) -> str:
        """The description or a gen_prefix for one document: a field's value, or the rendered template."""
        if not spec:
            return ""
        if spec in self.resolver.field_names:
            return str(doc[spec])
        return render(spec, doc, where)

    def _shot(self, shot: Mapping[str, Any], where: str) -> Shot:
        question = self.resolver.text(self.shot_text, shot, where)
        target = self.resolver.target(self.shot_target, shot, where)
        if isinstance(target, list):
            target = target[0]
        if isinstance(target, int) and self.shot_choice is not None:
            choices = self.resolver.choices(self.shot_choice, shot, where)
            answer = choices[self._gold(target, choices, where)]
        else:
            answer = "" if target is None else str(target)
        return Shot(question, answer, self.shot_target_delimiter, self.shot_fewshot_delimiter,
                    self._field_or_template(self.shot_gen_prefix, shot, where))

    @staticmethod
    def _gold(target: Any, choices: list[str], where: str) -> int | tuple[int, ...]:
        if isinstance(target, list):
            return tuple(RequestBuilder._gold(t, choices, where) for t in target)
        if isinstance(target, int):  # bool included: True is index 1, as in lm-eval
            if not 0 <= target < len(choices):
                raise DocumentError(f"{where}: target index {target} is out of range for {len(choices)} choices")
            return int(target)
        if isinstance(target, str) and target in choices:
            return choices.index(target)
        raise DocumentError(f"{where}: target {target!r} is not among the choices {choices}")

    def _category(self, doc: Mapping[str, Any], where: str) -> str | None:
        field = self.config.category_field
        if field is None:
            return None
        value = doc.get(field)
        if value is None or value == "":
            raise DocumentError(f"{where}: category field '{field}' is missing or empty")
        return str(value)
