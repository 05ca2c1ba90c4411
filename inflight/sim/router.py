"""The router in virtual time: the live router's pool and dispatcher, minus HTTP.

``inflight up`` runs the router with ``--hold-when-full`` (except for the peers whose own
deployments queue in vLLM): a request takes a slot on the least-loaded ready replica
(``router.pool.Pool.choose``), or waits in the router's FIFO until one frees
(``router.dispatch.Dispatcher.hold``/``pump``), bounded by ``--max-queue`` and
``--queue-timeout-s``. Without holding, it goes to the least-loaded ready replica even
when every slot is busy (vLLM queues it), and fails (503) when none is ready. Pool and
dispatcher are the live objects; what this module adds is only what the router's HTTP
layer does around them: count the request in L and in the received counter when it
arrives, and take it out of L when its response ends or it is refused
(``router.dispatch.Admission`` does that live; it is an ``async with`` and cannot run
without an event loop).

**Token admission** (``inflight sim run|compare --token-admission``, as ``inflight up
--token-admission``: the router's ``--discover-kv-tokens``; docs/capacity.md, "Token
demand at the router"): the dispatcher admits on KV tokens as well as slots, by its own
rule. Each replica's capacity is what the
live router reads from it: its ``vllm:cache_config_info`` line as the emulator writes it
(:func:`discovered_capacity`, parsed by ``router.kv_discovery.cache_from_metrics``: the usable
blocks, the null block left out, demands charged in whole blocks), set
before the replica takes work (live, a new endpoint is bounded by slots only until the
next discovery round, up to ``--discover-interval-s``; not modelled). Each request's demand
is ``router.tokens.demand_of`` on the body the live bench sends (token ids: exact prompt,
plus ``max_tokens``; :func:`demand`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Final

from inflight import names
from inflight.control.hold_order import HoldPlan, single_plan
from inflight.emulator.metrics import cache_config_info
from inflight.emulator.profile import Profile
from router.dispatch import Charge, Dispatcher
from router.endpoint_lists import apply
from router.errors import NoEndpoint, QueueFull, Shed
from router.kv_discovery import KvCache, cache_from_metrics
from router.pool import READY, Endpoint, Pool
from router.tokens import demand_of

# Defaults of ``inflight router`` (router/config.py), which ``inflight up`` keeps.
MAX_QUEUE = 1024
QUEUE_TIMEOUT_S = 300.0


def _no_clock() -> float:
    raise AssertionError("the router read a clock it was not given")


def discovered_capacity(profile: Profile) -> KvCache | None:
    """The KV cache the live router's ``--discover-kv-tokens`` reads from a replica of
    ``profile``: its ``/metrics``' ``vllm:cache_config_info`` line, as the emulator's server
    writes it, parsed by the router's own function (the usable blocks: the engine's own
    ``profile.usable_blocks``).

    >>> discovered_capacity(Profile(num_gpu_blocks=40, block_size=128, max_model_len=2048))
    KvCache(tokens=4992, block_size=128)
    """
    labels = cache_config_info(
        profile.block_size, profile.kv_blocks, profile.max_model_len, profile.num_gpu_blocks != 0
    )
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return cache_from_metrics(f"{names.VLLM_CACHE_CONFIG_INFO}{{{text}}} 1.0")


@lru_cache(maxsize=4096)
def demand(prompt_tokens: int, max_tokens: int) -> int:
    """A simulated request's demand in KV tokens, as the router counts the live bench's
    body (``inflight.bench.openloop.sender.completion_body``: the prompt as token ids, so
    exact, and ``max_tokens``): ``router.tokens.demand_of``.

    >>> demand(1800, 200)
    2000
    """
    return demand_of({"prompt": [0] * prompt_tokens, "max_tokens": max_tokens}, chat=False).total


# Told a request's slot: the endpoint, and what it holds there (its tokens, and with
# prefix-aware dispatch the prompt blocks it references: router.dispatch.Charge; give it to
# :meth:`SimRouter.finish`).
OnSlot = Callable[[Endpoint, Charge], None]
NO_CHARGE: Final = Charge(0)


class Held:
    """A request held in the router's FIFO: the dispatcher's ``Waiter``.

    ``pump`` hands it a slot with :meth:`set_result`; the simulator dispatches it then. Or
    it refuses it (the lateness bound, 503) with :meth:`set_exception`: ``on_refused``
    is told, the request already out of L.
    """

    __slots__ = ("_blocks", "_done", "_router", "_tokens", "on_refused", "on_slot")

    def __init__(
        self,
        on_slot: OnSlot,
        on_refused: Callable[[BaseException], None] | None = None,
        router: SimRouter | None = None,
        blocks: Sequence[int] = (),
        tokens: int = 0,
    ) -> None:
        self._done = False
        self.on_slot = on_slot
        self.on_refused = on_refused
        self._router = router
        self._blocks = blocks
        self._tokens = tokens

    def done(self) -> bool:
        return self._done

    def set_result(self, result: Endpoint, /) -> None:
        self._done = True
        charge = Charge(self._tokens)
        if self._blocks and self._router is not None:
            charge = self._router.dispatcher.cached(result, self._blocks, self._tokens)
        self.on_slot(result, charge)

    def set_exception(self, exception: BaseException, /) -> None:
        self._done = True
        if self._router is not None:
            self._router.dispatcher.leave()
        if self.on_refused is None:
            raise AssertionError(f"a held request was refused and nobody was told: {exception}")
        self.on_refused(exception)

    def cancel(self) -> None:
        self._done = True


class SimRouter:
    """One router: ``arrive`` → a slot now, or held; ``finish`` gives the slot back."""

    def __init__(
        self,
        slots: int,
        rng: random.Random,
        max_queue: int = MAX_QUEUE,
        queue_timeout_s: float = QUEUE_TIMEOUT_S,
        hold_when_full: bool = True,
        hold_deadline_s: float | None = None,
        clock: Callable[[], float] | None = None,
        max_late_s: float | None = None,
        plan: HoldPlan | None = None,
        kv_tokens: KvCache | None = None,
        prefix_balance: int | None = None,
        kv_blocks: int | None = None,
    ) -> None:
        """``kv_tokens``: token admission, each replica's cache as discovered from it
        (:func:`discovered_capacity`); None: slots only. ``prefix_balance``: the live
        router's ``--dispatch prefix --prefix-balance N`` (None: least-outstanding), its
        index bounded by each replica's ``kv_blocks``."""
        if (hold_deadline_s is not None or (plan is not None and plan.timed)) and clock is None:
            raise ValueError("a hold deadline needs the simulation's clock")
        self.pool = Pool(slots, rng=rng)
        if plan is not None and hold_deadline_s is not None:
            raise ValueError("give a plan (priority classes) or a hold deadline, not both")
        if plan is None:
            # ``inflight router``'s --max-late-s (off by default, as ``inflight up`` runs
            # it): a bound on lateness, so only with a deadline.
            plan = single_plan(hold_deadline_s, max_late_s if hold_deadline_s is not None else None)
        self.dispatcher = Dispatcher(
            self.pool,
            hold_when_full=hold_when_full,
            max_queue=max_queue,
            queue_timeout_s=queue_timeout_s,
            plan=plan,
            clock=clock if clock is not None else _no_clock,
            discover_kv_tokens=kv_tokens is not None,
            prefix_balance=prefix_balance,
        )
        self.kv_blocks = kv_blocks
        self.kv_tokens = kv_tokens
        self.received = 0  # router_requests_received_total

    @property
    def inflight(self) -> int:
        return self.dispatcher.inflight

    @property
    def queued(self) -> int:
        return self.dispatcher.queued

    def ready_endpoints(self) -> int:
        return self.pool.count_by_state()[READY]

    def demand(self, prompt_tokens: int, max_tokens: int) -> int:
        """A request's demand in KV tokens with token admission (:func:`demand`), else 0
        (the live router does not compute it then)."""
        return demand(prompt_tokens, max_tokens) if self.kv_tokens is not None else 0

    def set_endpoints(self, urls: Sequence[str]) -> None:
        """The endpoint file changed: the router applies it and pumps held requests (with
        token admission, a new replica's capacity is known before it takes work)."""
        d = self.dispatcher
        if self.kv_tokens is not None:
            for url in urls:
                if d.kv_capacity(url) is None:
                    d.set_kv_capacity(url, *self.kv_tokens)
        if d.prefix is not None and self.kv_blocks:
            for url in urls:
                d.prefix.set_capacity(url, self.kv_blocks)
        apply(d, urls)

    def arrive(
        self,
        on_slot: OnSlot,
        on_refused: Callable[[BaseException], None] | None = None,
        cls: int = 0,
        tokens: int = 0,
        blocks: Sequence[int] = (),
    ) -> Held | None:
        """A work request arrives: into L; a slot at once (``on_slot`` called now) or held
        (later a slot, or refused by the lateness bound: ``on_refused``, out of L).
        ``on_slot`` is told the endpoint and the tokens the request holds there.

        ``cls``: its priority class (the plan's index); ``tokens``: its demand
        (:meth:`demand`; give the same to :meth:`finish`); ``blocks``: its prompt's block
        hashes, for prefix-aware dispatch (recorded where it goes, as the live admission
        records them). Returns the :class:`Held` ticket
        when held; raises Shed (429) for a sheddable class with no free slot, QueueFull
        (503) when the FIFO is full, NoEndpoint (503) when not holding and no replica is
        ready: either way the request is already out of L again.
        """
        d = self.dispatcher
        self.received += 1
        d.enter()
        ep = d.try_acquire(tokens, blocks)
        if ep is not None:
            on_slot(ep, d.cached(ep, blocks, tokens))
            return None
        if not d.hold_when_full:
            d.leave()
            raise NoEndpoint("no ready endpoint")
        held = Held(on_slot, on_refused, self, blocks, tokens)
        try:
            d.hold(held, cls, tokens=tokens)
        except (QueueFull, Shed):
            d.leave()
            raise
        return held

    def give_up(self, held: Held) -> bool:
        """A held request timed out (504): out of the FIFO and of L; False if it had a slot."""
        if held.done():
            return False
        held.cancel()
        self.dispatcher.unhold(held)
        self.dispatcher.leave()
        return True

    def finish(self, ep: Endpoint, charge: Charge = NO_CHARGE) -> None:
        """A response ended: the slot (and what it held: ``charge``, as ``on_slot`` was
        told) go back, held requests take them; out of L."""
        self.dispatcher.leave(ep, charge.tokens, charge.blocks)
