"""Which waiting evaluation takes which idle worker (pool.match): a worker draws a problem's inputs
and float64 reference the first time it meets it (10-40 s at 16384 tokens, run G of
docs/scaling.md, where every worker drew every problem), so a problem goes back to its drawer
unless drawing it again is cheaper than waiting. Pure functions, no Ray: the pool itself is
tested in test_pool.py."""

from __future__ import annotations

import heapq

from astra_kernels.tools.cluster.pool import Slot, Waiter, match, steal_at

KIND = "NVIDIA H100"


def slots(count: int) -> list[Slot]:
    return [Slot(index=i, handle=None, device={"name": KIND}) for i in range(count)]


def waiter(problem: str, since: float = 0.0) -> Waiter:
    return Waiter(KIND, problem, since)


def test_a_worker_goes_to_the_waiter_whose_problem_it_drew_before_an_older_one():
    a, b = slots(2)
    a.drawn, b.drawn, b.problem = {"p"}, {"q"}, "q"
    old, mine = waiter("new"), waiter("p")
    assert match([a], [old, mine], [a, b], {}, now=0.0) == {mine: a}


def test_a_problem_whose_drawer_is_busy_waits_until_drawing_it_again_would_cost_less():
    a, b = slots(2)
    a.drawn, a.problem = {"p"}, "q"  # a drew p and measures q now
    b.drawn = {"r"}
    w = waiter("p", since=10.0)
    draw_s = {"p": 20.0}  # p's first evaluation took 20 s
    assert steal_at(w, draw_s) == 30.0
    assert match([b], [w], [a, b], draw_s, now=29.9) == {}  # b stays idle
    assert match([b], [w], [a, b], draw_s, now=30.0) == {w: b}
    # while p's first evaluation runs, what it costs is not known: no stealing at all
    assert match([b], [w], [a, b], {}, now=1e9) == {}


def test_a_problem_nobody_drew_takes_the_idle_worker_before_one_waiting_for_its_drawer():
    a, b = slots(2)
    a.drawn, a.problem = {"p"}, "q"
    waiting = [waiter("p"), waiter("new")]
    chosen = match([b], waiting, [a, b], {"p": 0.0}, now=0.0)  # p could steal at once, but need not
    assert chosen == {waiting[1]: b}


def test_a_lost_drawer_holds_nothing():
    a, b = slots(2)
    a.drawn = {"p"}  # a is lost: not among the live
    w = waiter("p")
    assert match([b], [w], [b], {}, now=0.0) == {w: b}


def test_a_problem_wanted_by_more_evaluations_than_its_drawers_is_drawn_again_at_once():
    """A shape searched several configurations at a time (one shape on many GPUs) draws on each."""
    a, b, c = slots(3)
    a.drawn, a.problem = {"p"}, "p"
    waiting = [waiter("p"), waiter("p")]
    assert match([b, c], waiting, [a, b, c], {}, now=0.0) == {waiting[0]: b, waiting[1]: c}


def simulate(problems: dict[str, tuple[int, float]], workers: int, evaluation_s: float,
             think_s: float = 0.05) -> tuple[float, int]:
    """Each problem p a sequential search of `problems[p][0]` evaluations (its own thread, asking
    again `think_s` after an answer comes: storing it, proposing the next), on `workers` workers
    under `match`; the first evaluation of p on a worker costs `problems[p][1]` more (its draw).
    Returns the makespan and the number of draws."""
    pool = slots(workers)
    idle = list(pool)
    left = {p: count for p, (count, _) in problems.items()}
    waiting = [Waiter(KIND, p, 0.0) for p in problems]
    first_s: dict[str, float] = {}
    events: list[tuple[float, int, str, int]] = []  # (ends, slot, problem, draws)
    asking: list[tuple[float, str]] = []  # (asks again at, problem)
    now, draws = 0.0, 0
    while waiting or events or asking:
        for w, slot in match(idle, waiting, pool, first_s, now).items():
            waiting.remove(w)
            idle.remove(slot)
            drawing = w.problem not in slot.drawn
            slot.drawn.add(w.problem)
            slot.problem = w.problem
            draws += drawing
            heapq.heappush(events, (now + evaluation_s + problems[w.problem][1] * drawing, slot.index, w.problem, drawing))
        steals = [steal_at(w, first_s) for w in waiting]
        ends = events[0][0] if events else float("inf")
        now = min([ends] + [t for t, _ in asking] + [t for t in steals if t > now])
        assert now < float("inf"), "waiters that nothing will ever serve"
        while events and events[0][0] <= now:
            _, index, problem, drawing = heapq.heappop(events)
            slot = pool[index]
            slot.problem = ""
            idle.append(slot)
            if drawing:
                first_s[problem] = max(first_s.get(problem, 0.0), evaluation_s + problems[problem][1])
            left[problem] -= 1
            if left[problem]:
                heapq.heappush(asking, (now + think_s, problem))
        while asking and asking[0][0] <= now:
            waiting.append(Waiter(KIND, heapq.heappop(asking)[1], now))
    return now, draws


def test_run_gs_bound_each_problem_is_drawn_once_and_both_workers_stay_busy():
    """Run G's case: many shapes searched at once on two GPUs, draws far dearer than evaluations."""
    problems = {f"shape{i}": (7, 5.0 * (1 + i % 4)) for i in range(12)}  # draws of 5 to 20 s
    makespan, draws = simulate(problems, workers=2, evaluation_s=0.3)
    # each caller taking the longest idle worker draws 24 here, every problem on both; a problem is
    # drawn again only where its drawer is busy with a draw longer than its own
    assert draws <= 14
    work = sum(draw for _, draw in problems.values()) + 12 * 7 * 0.3
    assert makespan <= work / 2 + 20.0 + 7 * (0.3 + 0.05)  # at most one problem's worth of imbalance


def test_cheap_draws_are_spread_so_that_no_worker_idles():
    problems = {f"shape{i}": (20, 0.001) for i in range(3)}
    makespan, _ = simulate(problems, workers=3, evaluation_s=1.0)
    assert makespan < 20 * (1.0 + 0.05) + 1.0  # each search runs without waiting for anyone


def test_the_tail_waits_for_its_drawer_rather_than_draw_again():
    """Two problems left, both drawn on one worker, the other idle: waiting 0.3 s beats a 20 s draw."""
    makespan, draws = simulate({"big": (10, 20.0), "small": (1, 20.0)}, workers=2, evaluation_s=0.3)
    assert draws == 2 and makespan <= 20.0 + 10 * (0.3 + 0.05) + 0.01


def test_a_worker_holding_two_waited_for_problems_goes_to_the_one_no_other_worker_holds():
    a, b = slots(2)
    a.drawn, b.drawn = {"p", "q"}, {"p"}
    wp, wq = waiter("p"), waiter("q")
    assert match([a, b], [wp, wq], [a, b], {}, now=0.0) == {wq: a, wp: b}


def bare_pool(workers: list[Slot]):
    """A WorkerPool's waiting room without Ray: its lock, slots and books, set by hand."""
    import threading
    from collections import deque

    from astra_kernels.tools.cluster.pool import WorkerPool

    pool = object.__new__(WorkerPool)
    pool._lock, pool.slots, pool.lost = threading.Condition(), workers, []
    pool._idle = {KIND: deque(s for s in workers if not s.doing)}
    pool._waiting, pool._draw_s, pool._changed, pool._next_match = [], {}, set(), {}
    pool._closed, pool._starting = False, 0
    return pool


def test_a_waiter_is_woken_when_a_newcomer_hands_it_an_idle_worker():
    """W waits for p's busy drawer; once a second evaluation of p arrives, p is wanted by more than
    its drawers and W takes the idle worker at once (not at its next timed wake-up)."""
    import threading
    import time

    from astra_kernels.tools.errors import WorkerError

    a, b = slots(2)
    a.drawn, a.doing, a.problem = {"p"}, "measuring q", "q"
    pool = bare_pool([a, b])
    pool._draw_s["p"] = 100.0
    got: dict = {}

    def ask(name: str) -> None:
        try:
            got[name] = (pool._acquire(KIND, name, "p")[0], time.monotonic())
        except WorkerError:
            got[name] = None

    first = threading.Thread(target=ask, args=("w",))
    first.start()
    time.sleep(0.3)
    assert "w" not in got  # waits for its drawer
    arrived = time.monotonic()
    second = threading.Thread(target=ask, args=("z",))
    second.start()
    first.join(2)
    slot, when = got["w"]
    assert slot is b and when - arrived < 0.5
    with pool._lock:
        pool._closed = True
        pool._lock.notify_all()
    second.join(2)
    assert got["z"] is None and not second.is_alive()


def test_waiters_past_their_steal_time_do_not_spin_while_every_worker_is_busy(monkeypatch):
    import threading
    import time

    from astra_kernels.tools.cluster import pool as pool_module
    from astra_kernels.tools.errors import WorkerError

    (a,) = slots(1)
    a.drawn, a.doing, a.problem = {"p"}, "measuring p", "p"
    pool = bare_pool([a])
    pool._draw_s["p"] = 0.0  # past its steal time at once; but no worker is idle
    calls = []
    real = pool_module.match
    monkeypatch.setattr(pool_module, "match", lambda *args: calls.append(1) or real(*args))

    def ask() -> None:
        try:
            pool._acquire(KIND, "w", "p")
        except WorkerError:
            pass

    thread = threading.Thread(target=ask)
    thread.start()
    time.sleep(0.5)
    with pool._lock:
        pool._closed = True
        pool._lock.notify_all()
    thread.join(2)
    assert len(calls) <= 3  # woken by a worker freeing or once a second, not 100 times a second


def test_hundreds_of_waiters_match_once_per_change_not_once_each(monkeypatch):
    """A whole suite's sweep puts every shape's evaluation in the waiting room at once (640 on
    2026-11-28's four-H200 run J, where the driver's core was the bound at 100% and the GPUs
    idled): each waiter re-ran the matching, itself quadratic in the waiters, whenever anything
    changed. Now the matching runs once per change and the waiters only look whether they were
    chosen: 300 waiters and a worker freeing three times match a handful of times, and every
    freed worker is taken."""
    import threading
    import time

    from astra_kernels.tools.cluster import pool as pool_module
    from astra_kernels.tools.errors import WorkerError

    workers = slots(2)
    for index, slot in enumerate(workers):
        slot.doing, slot.problem = "measuring", f"busy{index}"
    pool = bare_pool(workers)
    calls = []
    real = pool_module.match
    monkeypatch.setattr(pool_module, "match", lambda *args: calls.append(len(args[1])) or real(*args))
    taken = []

    def ask(index: int) -> None:
        try:
            taken.append(pool._acquire(KIND, f"w{index}", f"p{index}")[0])
        except WorkerError:
            pass

    threads = [threading.Thread(target=ask, args=(i,), daemon=True) for i in range(300)]
    try:
        for thread in threads:
            thread.start()
        time.sleep(1.0)
        assert calls == []  # no worker idle: nothing to match, however many arrive
        for freed in range(1, 4):
            pool._release(workers[0])
            deadline = time.monotonic() + 2
            while len(taken) < freed and time.monotonic() < deadline:
                time.sleep(0.01)
        assert len(taken) == 3 and len(calls) <= 6, calls
    finally:
        with pool._lock:
            pool._closed = True
            pool._lock.notify_all()
        for thread in threads:
            thread.join(5)
    assert not any(t.is_alive() for t in threads)


class _Remote:
    """A stand-in actor method: records each .remote(...) call."""

    def __init__(self):
        self.calls = []

    def remote(self, *args):
        self.calls.append(args)


class _Handle:
    def __init__(self):
        self.prefetch = _Remote()


def test_a_cluster_draws_each_problem_ahead_on_one_worker_and_sends_its_evaluations_there():
    """Run K's bound (docs/scaling.md): each worker drew a problem on one core when it first met it.
    WorkerPool.prefetch hands each problem to one worker (the fewest bytes to draw first), which
    draws it ahead; match then sends the problem's evaluations to it; a problem a worker already
    holds stays with it; until its first evaluation, a waiter for a busy drawer may steal after the
    estimated draw time; a replay's pool hands out nothing."""
    from astra_kernels import suite
    from astra_kernels.tools.cluster import pool as pool_module
    from astra_kernels.tools.measuring.draws import draw_bytes

    a, b = slots(2)
    a.handle, b.handle = _Handle(), _Handle()
    a.drawn = {"silu_and_mul 16x4096 bf16"}
    pool = bare_pool([a, b])
    pool._arguments = {"recordings": None}
    folder = suite.load("silu_and_mul")
    big, small, held = (suite.problem(folder, shape, "bf16") for shape in
                        ({"T": 4096, "D": 14336}, {"T": 4, "D": 4096}, {"T": 16, "D": 4096}))
    items = [(big, 1), (big, 2), (small, 1), (small, 2), (held, 1), (held, 2)]
    assert pool.prefetch(KIND, items) == 2
    # the big problem to the first worker with nothing to draw, the small one to the other
    assert big.label in a.ahead_labels and small.label in b.ahead_labels and held.label not in b.ahead_labels
    assert a.handle.prefetch.calls == [([(big, 1), (big, 2)], 1)]
    assert b.handle.prefetch.calls == [([(small, 1), (small, 2)], 1)]
    assert pool._draw_s[big.label] == 2 * draw_bytes(big) / pool_module.DRAW_BYTES_PER_S
    # asked again with more: the worker given it is sent its whole pending list, numbered (a new list
    # replaces the last, and one arriving late is dropped); the other's list stands, not resent
    more = suite.problem(folder, {"T": 8, "D": 4096}, "bf16")
    pool.prefetch(KIND, [(more, 1), (small, 1)])
    assert b.handle.prefetch.calls[-1] == ([(small, 1), (small, 2), (more, 1)], 2)
    assert len(a.handle.prefetch.calls) == 1
    # the small problem's waiter takes its drawer though an older waiter came first
    chosen = match([a, b], [waiter("other", 0.0), waiter(small.label, 1.0)], [a, b], pool._draw_s, 2.0)
    assert chosen[next(w for w in chosen if w.problem == small.label)] is b
    # a waiter for the big problem while its drawer is busy: held until the estimated draw time
    a.doing, a.problem = "measuring", "x"
    late = waiter(big.label, 0.0)
    assert match([b], [late], [a, b], pool._draw_s, 1.0) == {}
    assert match([b], [late], [a, b], pool._draw_s, pool._draw_s[big.label] + 0.1) == {late: b}
    replay = bare_pool(slots(1))
    replay._arguments = {"recordings": ["r.sqlite"]}
    assert replay.prefetch(KIND, items) == 0


def test_a_host_drops_a_list_of_draws_that_arrives_after_a_later_one(monkeypatch):
    from astra_kernels.tools.cluster import host as host_module
    from astra_kernels.tools.measuring import draws

    class Worker:
        calls = []

        def call(self, function, items):
            assert function is draws.prefetch
            self.calls.append(items)
            return 1

    monkeypatch.setattr(host_module, "EvaluationWorker", Worker)
    import threading

    actor = object.__new__(host_module.EvaluationHost)
    actor.workers, actor._using, actor._prefetched = [Worker()], threading.Lock(), 0
    assert actor.prefetch(["second"], 2) == 1 and actor.prefetch(["first"], 1) == 0
    assert Worker.calls == [["second"]]


def test_the_first_evaluation_on_its_drawer_counts_as_first_and_ends_drawing_ahead():
    a, b = slots(2)
    a.ahead_labels = {"p"}
    pool = bare_pool([a, b])
    slot, first = pool._acquire(KIND, "w", "p")
    assert slot is a and first and "p" in a.drawn and "p" not in a.ahead_labels
