# Over 400 lines: one algorithm (the prefix tree, its batches and why they equal the plain path), read as a whole.
"""Shared-prefix scoring: the plain path's log-likelihoods, without recomputing shared token prefixes.

A request's model input is `inp = (context + continuation)[:-1]` (token ids, built exactly as the plain path builds
them) and its score is the sum over its c continuation tokens of log P(continuation[k] | inp[: n - c + k + 1]). Each
value depends only on the request's own tokens, and a causal model's hidden state at position p depends only on tokens
0..p, so requests whose inputs share a *token* prefix can share that prefix's computation exactly. Grouping is on token
ids, never on strings: joint tokenization can change the tokens at a context/continuation seam (a context ending
mid-word), and a shared string prefix is not always a shared token prefix.

Two levels:

1. The prefix shared by every request of the call (a `first_n` few-shot prompt, a BOS token) runs once; its keys and
   values (KV cache) are expanded over each batch, so rows only compute what follows it.
2. What follows is a compressed trie of the requests' remaining tokens. A row packs a subtree (one document's context
   with all its choices; a CrowS-Pairs pair's shared leading tokens with both sentences) with an attention mask that
   lets each token attend only to itself and its ancestors ("tree attention"), position ids = depth. A subtree too big
   for one row is split: its children go to several rows, each repeating the path from the shared prefix.

Rows are sorted by length and batched with right padding. The vocabulary projection is applied only at scored
positions (hidden states from the base model, then the output embedding); log_softmax runs in the model's dtype and
each request's values are summed in that dtype, as lm-eval does.

Requests that lm-eval would left-truncate (`len(context + continuation) > max_length + 1`) are not handled here: the
scorer sends them down the plain path.

Whether a model supports this (a custom 4D attention mask, explicit position ids, a KV cache, logits = output
embedding of the last hidden state) is checked numerically against the plain path on synthetic requests
(`probe_fast_path`); a model that fails is scored on the plain path.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

ROW_BUDGET_MIN = 64  # tokens per row: max(this, 2 × the longest request input after the shared prefix)
PACK_MIN_SHARED = 16  # branches share a row when their common path is this long (or saves ≥ 5% of the row)
SUPPORTED_ATTENTION = ("sdpa", "eager")
MODES = ("projection", "full")  # projection: output embedding at scored positions only; full: the model's logits


# --- the plan: shared prefix, trie, rows ----------------------------------------------------------------------------


class _Node:
    """A trie node: the tokens distinct[rep][start:end], i.e. depths start..end-1 after the shared prefix."""

    __slots__ = ("rep", "start", "end", "children", "ends", "size", "owner")

    def __init__(self, rep: int, start: int, end: int):
        self.rep, self.start, self.end = rep, start, end
        self.children: list[_Node] = []
        self.ends = -1  # the distinct suffix ending here, if any
        self.size = 0  # tokens in this subtree
        self.owner = -1  # the row that scores the requests ending here

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass
class Row:
    """One packed row: tokens, each token's parent slot (-1: only the shared prefix before it) and depth."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    segments: list[tuple[int, int, int]] = field(default_factory=list)  # (first slot, end slot, parent slot)
    last_slot: dict[int, int] = field(default_factory=dict)  # id(node) -> slot of the node's last token here

    def __len__(self) -> int:
        return len(self.tokens)

    def mask(self) -> np.ndarray:
        """mask[i, j]: token i attends to token j, i.e. j is i or one of its ancestors."""
        n = len(self.tokens)
        out = np.zeros((n, n), dtype=bool)
        for start, end, parent in self.segments:
            if parent >= 0:
                out[start:end] = out[parent]
            out[start:end, start:end] |= np.tri(end - start, dtype=bool)
        return out


@dataclass
class Plan:
    prefix: tuple[int, ...]
    rows: list[Row]
    request_row: list[int]  # the row scoring each request
    # per request, one entry per scored position: its slot in the request's row, or -1 - p for prefix position p
    scored_slots: list[list[int]]


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _append_segment(row: Row, distinct: Sequence[tuple[int, ...]], node: _Node, parent: int) -> int:
    """Lay out a node's tokens after `parent` (a slot, or -1); returns the slot of its last token."""
    start = len(row.tokens)
    depth = row.depths[parent] + 1 if parent >= 0 else 0
    tokens = distinct[node.rep][node.start:node.end]
    row.tokens.extend(tokens)
    row.parents.append(parent)
    row.parents.extend(range(start, start + len(tokens) - 1))
    row.depths.extend(range(depth, depth + len(tokens)))
    row.segments.append((start, start + len(tokens), parent))
    row.last_slot[id(node)] = start + len(tokens) - 1
    return start + len(tokens) - 1


def plan_requests(
    inputs: Sequence[tuple[int, ...]], cont_lengths: Sequence[int], row_budget: int | None = None,
) -> Plan:
    """Where every request's scored positions are computed. `inputs[i]` is request i's model input (non-empty)."""
    if not inputs:
        return Plan((), [], [], [])
    first, last = min(inputs), max(inputs)
    shared = min(_common_prefix(first, last), min(len(s) for s in inputs) - 1)
    prefix = tuple(first[:shared])
    suffixes = [s[shared:] for s in inputs]
    budget = row_budget or max(ROW_BUDGET_MIN, 2 * max(len(s) for s in suffixes))

    # Compressed trie of the distinct suffixes, built in sorted order; `stack` is the path to the previous suffix.
    distinct = sorted(set(suffixes))
    root = _Node(-1, 0, 0)
    stack = [root]
    previous: tuple[int, ...] = ()
    for rep, seq in enumerate(distinct):
        branch = _common_prefix(previous, seq)  # < len(seq): sorted and distinct
        while stack[-1] is not root and stack[-1].start >= branch:
            stack.pop()
        top = stack[-1]
        if top.end > branch:  # split `top` at the branch point; its old content moves to `tail`
            tail = _Node(top.rep, branch, top.end)
            tail.children, tail.ends = top.children, top.ends
            top.end, top.children, top.ends = branch, [tail], -1
        leaf = _Node(rep, branch, len(seq))
        leaf.ends = rep
        top.children.append(leaf)
        stack.append(leaf)
        previous = seq

    order = [root]
    for node in order:
        order.extend(node.children)
    node_of = {node.ends: node for node in order if node.ends >= 0}
    rep_of = {seq: rep for rep, seq in enumerate(distinct)}
    end_nodes = [node_of[rep_of[seq]] for seq in suffixes]
    for node in reversed(order):
        node.size = node.length + sum(child.size for child in node.children)

    rows: list[Row] = []

    def new_row(path: list[_Node]) -> Row:
        row = Row()
        parent = -1
        for node in path:
            parent = _append_segment(row, distinct, node, parent)
        rows.append(row)
        return row

    def place_subtree(row: Row, node: _Node, parent: int) -> None:
        todo = [(node, parent)]
        while todo:
            current, parent_slot = todo.pop()
            slot = _append_segment(row, distinct, current, parent_slot)
            current.owner = len(rows) - 1
            todo.extend((child, slot) for child in reversed(current.children))

    # Depth first, so the first row emitted after visiting a node lies under it (and holds its whole path).
    work: list[tuple[_Node, list[_Node]]] = [(child, []) for child in reversed(root.children)]
    while work:
        node, chain = work.pop()
        path = chain + [node]
        path_length = sum(n.length for n in path)
        node.owner = len(rows)
        if not node.children:
            new_row(path)
            continue
        branches = len(node.children) - 1 + (1 if node.ends >= 0 else 0)
        if path_length >= PACK_MIN_SHARED or path_length * branches >= 0.05 * (path_length + node.size):
            room = budget - path_length
            groups: list[list[_Node]] = []
            used: list[int] = []
            deeper: list[_Node] = []
            for child in node.children:  # first fit; a child too big for any row is split further
                if child.size > room:
                    deeper.append(child)
                    continue
                for g, total in enumerate(used):
                    if total + child.size <= room:
                        groups[g].append(child)
                        used[g] += child.size
                        break
                else:
                    groups.append([child])
                    used.append(child.size)
            if not groups and not deeper:  # pragma: no cover - a node with children always places some
                groups.append([])
            for group in groups:
                row = new_row(path)
                parent = row.last_slot[id(node)]
                for child in group:
                    place_subtree(row, child, parent)
            work.extend((child, path) for child in reversed(deeper))
        else:
            work.extend((child, path) for child in reversed(node.children))

    request_row = [node.owner for node in end_nodes]
    scored_slots = []
    for i, node in enumerate(end_nodes):
        row = rows[request_row[i]]
        n, c = shared + len(suffixes[i]), cont_lengths[i]
        slots = []
        slot = row.last_slot[id(node)]
        for p in range(n - 1, n - c - 1, -1):
            if slot >= 0:
                slots.append(slot)
                slot = row.parents[slot]
            else:
                slots.append(-1 - p)
        slots.reverse()
        scored_slots.append(slots)
    return Plan(prefix, rows, request_row, scored_slots)


# --- execution ------------------------------------------------------------------------------------------------------


@dataclass
class FastStats:
    """What one call computed (the benchmark reports these)."""

    requests: int = 0
    prefix_tokens: int = 0
    row_tokens: int = 0
    padded_tokens: int = 0
    forwards: int = 0
    scored_positions: int = 0

    @property
    def computed_tokens(self) -> int:
        return self.prefix_tokens + self.row_tokens


class PrefixSharingRunner:
    """Runs a plan on a causal LM. `mode`: `projection` (base model + output embedding at scored positions only) or
    `full` (the model's own logits, then the scored positions)."""

    def __init__(self, model, device: torch.device, mode: str = "projection"):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        self.model = model
        self.device = device
        self.mode = mode
        self.dtype = next(model.parameters()).dtype
        self.attention = getattr(model.config, "_attn_implementation", None) or "eager"
        self.stats = FastStats()
        body = model.base_model if mode == "projection" else model
        self._body = body
        self._head = model.get_output_embeddings() if mode == "projection" else None
        parameters = inspect.signature(body.forward).parameters
        self._cache_kw = "cache" if "cache" in parameters else "past_key_values"

    @staticmethod
    def supports(model) -> str | None:
        """None when the model can run this path, else the reason why not."""
        config = getattr(model.config, "text_config", None) or model.config
        attention = getattr(model.config, "_attn_implementation", None) or "eager"
        if attention not in SUPPORTED_ATTENTION:
            return f"attention implementation '{attention}'"
        if getattr(config, "is_encoder_decoder", False):
            return "encoder-decoder model"
        layer_types = getattr(config, "layer_types", None) or []
        if any(kind != "full_attention" for kind in layer_types):
            return "layers other than full attention"
        if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
            return "sliding-window attention"
        return None

    @torch.inference_mode()
    def score(
        self,
        inputs: Sequence[tuple[int, ...]],
        continuations: Sequence[tuple[int, ...]],
        batch_size: int | Callable[[int], int],
        token_budget: int | None = None,
        on_done: Callable[[list[int], list[float]], None] | None = None,
    ) -> list[float]:
        """Log-likelihood of each request (inputs[i] = (ctx + cont)[:-1], continuations[i] = cont)."""
        plan = plan_requests(inputs, [len(c) for c in continuations])
        offsets = np.cumsum([0] + [len(c) for c in continuations])
        values = torch.empty(int(offsets[-1]), dtype=self.dtype, device=self.device)
        stats = self.stats
        stats.requests += len(inputs)

        # Per row: the scored (slot, target, destination) triples; the prefix's own scored positions apart.
        row_pairs: list[list[tuple[int, int, int]]] = [[] for _ in plan.rows]
        prefix_pairs: list[tuple[int, int, int]] = []
        for i, slots in enumerate(plan.scored_slots):
            for k, slot in enumerate(slots):
                triple = (slot, continuations[i][k], int(offsets[i]) + k)
                if slot >= 0:
                    row_pairs[plan.request_row[i]].append(triple)
                else:
                    prefix_pairs.append((-1 - slot, triple[1], triple[2]))
        row_requests: list[list[int]] = [[] for _ in plan.rows]
        for i, r in enumerate(plan.request_row):
            row_requests[r].append(i)

        prefix_kv = self._run_prefix(plan.prefix, prefix_pairs, values) if plan.prefix else None

        results = [0.0] * len(inputs)
        packed = pack_units([len(row) for row in plan.rows])
        start = 0
        while start < len(packed):
            width = sum(len(plan.rows[u]) for u in packed[start])
            rows_cap = batch_size(width + len(plan.prefix)) if callable(batch_size) else int(batch_size)
            count = max(1, rows_cap)
            if token_budget:
                count = max(1, min(count, token_budget // max(width, 1)))
            chunk = packed[start:start + count]
            start += len(chunk)
            self._run_rows([[plan.rows[u] for u in units] for units in chunk],
                           [[row_pairs[u] for u in units] for units in chunk], prefix_kv, values)
            done = [i for units in chunk for u in units for i in row_requests[u]]
            for i in done:
                results[i] = float(values[int(offsets[i]):int(offsets[i + 1])].sum())
            if on_done is not None:
                on_done(done, [results[i] for i in done])
        return results

    # --- forward passes -----------------------------------------------------------------------------------------

    def _forward(self, input_ids, attention_mask, position_ids, past):
        kwargs = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
        if past is not None:
            kwargs[self._cache_kw] = past
            kwargs["use_cache"] = True
        else:
            kwargs["use_cache"] = False
        self.stats.forwards += 1
        out = self._body(**kwargs)
        return out.last_hidden_state if self.mode == "projection" else out.logits

    def _store(self, states: torch.Tensor, flat_positions: list[int], pair_rows: list[int], targets: list[int],
               destinations: list[int], values: torch.Tensor) -> None:
        """values[destinations[j]] = log P(targets[j]) at flat_positions[pair_rows[j]] of `states`."""
        logprobs = self._logprobs_at(states, torch.tensor(flat_positions, device=states.device))
        device = logprobs.device  # the output layer's: on a sharded model, not where the inputs went
        gathered = logprobs[torch.tensor(pair_rows, device=device), torch.tensor(targets, device=device)]
        values[torch.tensor(destinations, device=self.device)] = gathered.to(self.device)

    def _logprobs_at(self, states: torch.Tensor, flat_index: torch.Tensor) -> torch.Tensor:
        """log_softmax over the vocabulary at the selected flattened (batch·position) indices, in the model dtype."""
        selected = states.reshape(-1, states.shape[-1]).index_select(0, flat_index)
        logits = self._head(selected) if self.mode == "projection" else selected
        self.stats.scored_positions += int(flat_index.numel())
        return F.log_softmax(logits, dim=-1)

    def _run_prefix(self, prefix: tuple[int, ...], pairs: list[tuple[int, int, int]], values: torch.Tensor):
        from transformers import DynamicCache

        cache = DynamicCache()
        self.stats.prefix_tokens += len(prefix)
        states = self._forward(torch.tensor([prefix], dtype=torch.long, device=self.device), None, None, cache)
        if pairs:
            positions = sorted({p for p, _, _ in pairs})
            where = {p: k for k, p in enumerate(positions)}
            self._store(states, positions, [where[p] for p, _, _ in pairs], [t for _, t, _ in pairs],
                        [d for _, _, d in pairs], values)
        return [(layer.keys, layer.values) for layer in cache.layers]

    def _run_rows(self, rows: list[list[Row]], pairs: list[list[list[tuple[int, int, int]]]], prefix_kv,
                  values: torch.Tensor) -> None:
        """One forward over a batch; each batch row holds one or more units (plan rows) side by side."""
        batch = len(rows)
        width = max(sum(len(unit) for unit in units) for units in rows)
        past_length = prefix_kv[0][0].shape[-2] if prefix_kv else 0
        ids = np.zeros((batch, width), dtype=np.int64)
        positions = np.zeros((batch, width), dtype=np.int64)
        mask = np.zeros((batch, 1, width, past_length + width), dtype=bool)
        mask[:, :, :, :past_length] = True
        diagonal = np.arange(width)
        mask[:, 0, diagonal, past_length + diagonal] = True  # padding attends to itself: finite, and never read
        flat, pair_rows, targets, destinations = [], [], [], []
        real = 0
        for b, (units, unit_pairs) in enumerate(zip(rows, pairs)):
            offset = 0
            for unit, triples in zip(units, unit_pairs):
                n = len(unit)
                ids[b, offset:offset + n] = unit.tokens
                positions[b, offset:offset + n] = np.asarray(unit.depths) + past_length
                mask[b, 0, offset:offset + n, past_length + offset:past_length + offset + n] = unit.mask()
                slots = sorted({slot for slot, _, _ in triples})
                where = {slot: len(flat) + k for k, slot in enumerate(slots)}
                flat.extend(b * width + offset + slot for slot in slots)
                for slot, target, destination in triples:
                    pair_rows.append(where[slot])
                    targets.append(target)
                    destinations.append(destination)
                offset += n
            real += offset
        self.stats.row_tokens += real
        self.stats.padded_tokens += batch * width
        device = self.device
        attention_mask = torch.from_numpy(mask).to(device)
        if self.attention == "eager":
            attention_mask = torch.zeros(mask.shape, dtype=self.dtype, device=device).masked_fill(
                ~attention_mask, torch.finfo(self.dtype).min
            )
        past = None
        if prefix_kv:
            from transformers import DynamicCache

            past = DynamicCache(
                ddp_cache_data=[(k.expand(batch, -1, -1, -1), v.expand(batch, -1, -1, -1)) for k, v in prefix_kv]
            )
        states = self._forward(
            torch.from_numpy(ids).to(device), attention_mask, torch.from_numpy(positions).to(device), past
        )
        self._store(states, flat, pair_rows, targets, destinations, values)


def pack_units(lengths: Sequence[int]) -> list[list[int]]:
    """First-fit decreasing: units (plan rows) into batch rows no wider than the longest unit, so rows of a batch
    have nearly the same width and padding nearly vanishes. Returned longest first."""
    if not lengths:
        return []
    order = sorted(range(len(lengths)), key=lambda u: -lengths[u])
    capacity = lengths[order[0]]
    bins: list[list[int]] = []
    free: list[int] = []
    open_bins: list[int] = []  # bins that still have room for the shortest unit
    shortest = lengths[order[-1]]
    for u in order:
        n = lengths[u]
        for k, b in enumerate(open_bins):
            if free[b] >= n:
                bins[b].append(u)
                free[b] -= n
                if free[b] < shortest:
                    open_bins.pop(k)
                break
        else:
            bins.append([u])
            free.append(capacity - n)
            if capacity - n >= shortest:
                open_bins.append(len(bins) - 1)
    bins.sort(key=lambda units: -sum(lengths[u] for u in units))
    return bins


def synthetic_probe_requests(vocab_size: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(context, continuation) token ids sharing prefixes in every way the fast path distinguishes."""
    span = max(8, min(vocab_size - 1, 500))
    generator = np.random.default_rng(1234)
    tok = lambda n: tuple(int(t) for t in generator.integers(1, span, size=n))  # noqa: E731
    shots, doc_a, doc_b = tok(7), tok(5), tok(4)
    a1, a2 = tok(1), tok(3)
    return [
        (shots + doc_a, a1),  # single-token choice: scored at the context's last position
        (shots + doc_a, tok(1)),
        (shots + doc_a, a2),
        (shots + doc_a, a2[:2] + tok(2)),  # shares leading continuation tokens with the previous choice
        (shots + doc_b, tok(2)),
        (shots[:3], shots[3:] + doc_b[:2]),  # a continuation that runs through the shared prefix
    ]


def probe_fast_path(runner: PrefixSharingRunner, plain_forward) -> float | None:
    """None when the fast path reproduces `plain_forward` (the plain path's batch function) on synthetic requests;
    else the largest difference (inf when it fails outright)."""
    config = getattr(runner.model.config, "text_config", None) or runner.model.config
    requests = synthetic_probe_requests(int(getattr(config, "vocab_size", 0) or 0) or 500)
    rows = [(ctx + cont[:-1], cont) for ctx, cont in requests]
    tolerance = 1e-3 if runner.dtype in (torch.float32, torch.float64) else 0.5
    try:
        fast = runner.score([inp for inp, _ in rows], [cont for _, cont in rows], batch_size=2)
        plain = plain_forward(rows)
    except Exception:  # any failure means the model cannot run this path
        return float("inf")
    finally:
        runner.stats = FastStats()
    error = max(abs(a - b) for a, b in zip(fast, plain))
    return None if error <= tolerance else error
