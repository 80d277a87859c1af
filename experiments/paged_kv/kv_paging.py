"""KV-cache memory under a serving trace: contiguous reservation against paging (Kwon et al. 2023).

A server holds a budget of `budget` token slots of KV cache and runs continuous (iteration-level) batching: at
every iteration each running request writes one token's keys and values (its whole prompt at the first), and
waiting requests are admitted first come, first served while the allocator can place them. A request leaves
when its output is complete and its memory returns to the pool.

Allocators:
- contiguous: at admission a request reserves one contiguous region of the slot space (first fit) sized by a
  policy: `max` (the model's maximum length, as systems that pre-allocate do), `pow2` (its true length rounded
  up to a power of two) or `oracle` (exactly its true length, a bound no real system reaches).
- paged: slots come in blocks of `block` tokens, taken one at a time as a request's tokens need them; a
  request that needs a block when none is free preempts the most recently admitted request (its blocks
  freed; it is queued again at the front, to recompute its prompt and the tokens it had generated), as vLLM
  does.

Waste, as Kwon et al. count it: the share of the budget not holding any token's keys and values while requests
are waiting (the server is saturated): slots reserved but not yet (or never) written, the unwritten tail of
last blocks, and free slots no waiting request fits into.

Pure Python, no torch: everything here is counted, not timed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

POLICIES = ("max", "pow2", "oracle")


@dataclass(frozen=True)
class Request:
    prompt: int
    output: int

    @property
    def total(self) -> int:
        return self.prompt + self.output


def trace(
    n: int, seed: int, *, prompt_mean: float, output_mean: float, sigma: float, max_len: int
) -> list[Request]:
    """n requests with log-normal prompt and output lengths of the given means and log-space spread σ, each at
    least 1 token and together at most max_len (the output is cut where it would pass it)."""
    rng = np.random.default_rng(seed)

    def draw(mean: float) -> np.ndarray:
        return np.maximum(1, np.round(rng.lognormal(math.log(mean) - sigma**2 / 2, sigma, n))).astype(int)

    prompts = np.minimum(draw(prompt_mean), max_len - 1)
    outputs = np.minimum(draw(output_mean), max_len - prompts)
    return [Request(int(p), int(o)) for p, o in zip(prompts, outputs)]


def reservation(policy: str, req: Request, max_len: int) -> int:
    if policy == "max":
        return max_len
    if policy == "pow2":
        return min(max_len, 1 << (req.total - 1).bit_length())
    if policy == "oracle":
        return req.total
    raise ValueError(f"unknown policy {policy!r}; choose one of {POLICIES}")


class _FirstFit:
    """Free regions of a linear slot space [0, size), kept sorted and merged."""

    def __init__(self, size: int):
        self.free = [(0, size)]  # (start, length)

    def take(self, n: int) -> int | None:
        for i, (start, length) in enumerate(self.free):
            if length >= n:
                self.free[i : i + 1] = [(start + n, length - n)] if length > n else []
                return start
        return None

    def give(self, start: int, n: int) -> None:
        self.free.append((start, n))
        self.free.sort()
        merged = [self.free[0]]
        for s, ln in self.free[1:]:
            ps, pl = merged[-1]
            if ps + pl == s:
                merged[-1] = (ps, pl + ln)
            else:
                merged.append((s, ln))
        self.free = merged

    @property
    def largest(self) -> int:
        return max((ln for _, ln in self.free), default=0)


@dataclass(eq=False)  # compared by identity: two requests of equal lengths are two requests
class _Running:
    req: Request
    written: int = 0  # tokens whose keys and values are in the cache
    done: int = 0  # output tokens generated
    start: int = 0  # contiguous: region start
    reserved: int = 0  # contiguous: region size; paged: blocks × block


def simulate(reqs: list[Request], budget: int, *, allocator: str, max_len: int, block: int = 16) -> dict:
    """Run the trace to completion. Per iteration (averaged over the run): running requests, slots reserved,
    slots written; and the iterations it took, tokens generated and preemptions."""
    paged = allocator == "paged"
    if not paged and allocator not in POLICIES:
        raise ValueError(f"unknown allocator {allocator!r}; choose 'paged' or one of {POLICIES}")
    space = _FirstFit(budget)
    free_blocks = budget // block
    waiting, running = list(reqs), []
    its = batch = preempted = 0
    busy = busy_written = busy_reserved = 0  # over the iterations that left a request waiting
    while waiting or running:
        # admit (first come, first served; a request that does not fit blocks those behind it)
        while waiting:
            req = waiting[0]
            if paged:
                need = -(-(req.prompt + 1) // block)
                if need > free_blocks:
                    break
                free_blocks -= need
                running.append(_Running(req, reserved=need * block))
            else:
                size = reservation(allocator, req, max_len)
                start = space.take(size)
                if start is None:
                    break
                running.append(_Running(req, start=start, reserved=size))
            waiting.pop(0)
        if not running:  # the queue's head does not fit an empty cache: it never will
            raise ValueError(f"a request does not fit the {allocator} allocator's budget of {budget} slots")
        # one iteration: the prompt at the first, then one token each
        for r in list(running):
            if r not in running:
                continue  # preempted earlier in this iteration
            add = r.req.prompt + 1 if r.written == 0 else 1
            while paged and r.written + add > r.reserved:
                if free_blocks == 0:
                    victim = running[-1]
                    running.remove(victim)
                    free_blocks += victim.reserved // block
                    v = victim.req
                    waiting.insert(0, Request(v.prompt + victim.done, v.output - victim.done))
                    preempted += 1
                    if victim is r:
                        break
                    continue
                free_blocks -= 1
                r.reserved += block
            if r not in running:
                continue
            r.written += add
            r.done += 1
        its += 1
        batch += len(running)
        if waiting:
            now_reserved, now_written = sum(r.reserved for r in running), sum(r.written for r in running)
            busy, busy_written, busy_reserved = (
                busy + 1,
                busy_written + now_written,
                busy_reserved + now_reserved,
            )
        for r in [r for r in running if r.done >= r.req.output]:
            running.remove(r)
            if paged:
                free_blocks += r.reserved // block
            else:
                space.give(r.start, r.reserved)
    return {
        "iterations": its,
        "mean_batch": batch / its,
        "tokens_per_iteration": sum(r.output for r in reqs) / its,
        "saturated": busy,
        "waste": 1.0 - busy_written / (busy * budget) if busy else None,
        "reserved_unwritten": 1.0 - busy_written / busy_reserved if busy_reserved else None,
        "preempted": preempted,
    }
