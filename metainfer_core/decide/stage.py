"""Rollback: the default path always exists. A verified candidate is eligible when it ran,
respects every hard bound, and pays:
- it beats the default's latency by more than the measured noise, or
- memory counts (weights.memory > 0), it needs at least MIN_MEM_GAIN less peak memory, and it is
  not slower beyond noise (what `weights=embedded` asks for), or
- the default itself does not fit the device memory and the candidate does.
Among eligible candidates, the chosen one has the best score on measured values, the search's
objective (w1 latency/default + w2 peak memory/default, or /device limit where the default does not
fit, + w3 accuracy loss + change penalty x actions), and must score better than the default;
without weights, the fastest is chosen. A plan with fewer actions that the best one does not beat
beyond noise (no more loss, nor memory when it counts) is chosen instead.
Otherwise the default stays (rolled_back).

"Beyond noise" uses the interleaved rounds of verify: each round timed the default and the
candidate back to back, so the per-round ratio candidate/default cancels slow drift of a shared
machine. Faster: the bootstrap upper bound (95th percentile) of the median ratio is below
1 - MIN_GAIN; slower: its lower bound (5th percentile) is above 1 + MIN_GAIN. A faster plan's median must also be
below the default's (the figures plan.md reports beside the decision)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import onnx

from metainfer_core.decide.confirm import Confirmation, PairTimer, confirm
from metainfer_core.decide.range_check import AcrossRange, across_range
from metainfer_core.decide.noise import MIN_GAIN, ratio_bounds
from metainfer_core.ir.kernels import group_kernels
from metainfer_core.ir.memory import DEFAULT_STRATEGY, model_strategy, peak_reason, plan_memory
from metainfer_core.ir.tensors import tensor_infos
from metainfer_core.plan.report import bytes_vs_budget
from metainfer_core.search.score import Weights, memory_base
from metainfer_core.verify.measure import Verified

if TYPE_CHECKING:
    from metainfer_core.backends import Backend
    from metainfer_core.normalize.shape_range import Point
    from metainfer_core.search.candidate import Candidate
    from metainfer_core.search.stage import SearchOutcome
    from metainfer_core.settings import Settings
    from metainfer_core.verify.stage import VerifyOutcome

MIN_MEM_GAIN = 0.05  # a memory-driven plan must save at least 5 % of peak memory


@dataclass
class Decision:
    decision: str            # adapted | rolled_back
    reason: str
    chosen: int | None       # index into the candidates, None for the default
    verdicts: dict[str, str] = field(default_factory=dict)   # candidate label -> why chosen or not
    basis: str = ""          # why the chosen plan pays: faster | memory | fit (the default does not fit)
    confirmations: list[Confirmation] = field(default_factory=list)   # the chosen plan's, and those that failed
    across: AcrossRange | None = None    # the chosen plan confirmed at the shape range's points
    default_alone: Confirmation | None = None   # the default kept: timed alone (its clean latency)


def decide(baseline: Verified, candidates: list[Verified], max_loss: float, memory_limit: int,
           objective: Weights | None = None, changes: list[int] | None = None, memory_budget: int = 0,
           excluded: dict[int, str] | None = None) -> Decision:
    """`changes`: how many actions each candidate applies (the change penalty's count);
    `memory_budget`: what a model may hold on the target (0: the limit), the memory term's yardstick
    with the objective's floor (search.score.memory_base); `excluded`: candidates rejected before
    anything else is looked at (index -> why: a confirmation they did not pass)."""
    if not baseline.ok:
        raise RuntimeError(f"the default plan failed on the target: {baseline.error}")
    changes = changes or [0] * len(candidates)
    default_fits = baseline.peak_mem_bytes <= memory_limit
    budget = memory_budget or memory_limit
    base_mem = memory_base(baseline.peak_mem_bytes, memory_limit, budget,
                           objective.memory_floor if objective else 0.0)   # the search's yardstick
    rejected, eligible = {}, {}          # rejected: label -> why not; eligible: index -> (score, why it pays)
    terms = {}                           # index -> the score's terms (why one eligible plan lost to another)
    basis = {}                           # index -> faster | memory | fit
    for i, c in enumerate(candidates):
        if i in (excluded or {}):
            rejected[c.label] = excluded[i]
            continue
        if not c.ok:
            rejected[c.label] = f"failed to run ({c.error})"
            continue
        if c.accuracy_loss > max_loss:
            rejected[c.label] = (f"loses {c.accuracy_loss:.4g} accuracy on the held-out samples (bound {max_loss}"
                                 + (f"; {c.calibration_loss:.4g} on the calibration samples)"
                                    if c.calibration_loss == c.calibration_loss
                                    and c.calibration_loss != c.accuracy_loss else ")"))
            continue
        worst = max(c.point_losses.items(), key=lambda kv: kv[1], default=None)
        if worst is not None and worst[1] > max_loss:
            rejected[c.label] = f"loses {worst[1]:.4g} accuracy at the shape range's {worst[0]} (bound {max_loss})"
            continue
        if c.peak_mem_bytes > memory_limit:
            rejected[c.label] = f"needs {c.peak_mem_bytes} B (limit {memory_limit} B)"
            continue
        median, low, high = ratio_bounds(baseline.samples_ms, c.samples_ms)
        mem_ratio = c.peak_mem_bytes / base_mem
        saved = 1 - c.peak_mem_bytes / max(baseline.peak_mem_bytes, 1)
        # the medians reported beside the decision must agree with it: paired rounds that say "faster"
        # while the candidate's median is not below the default's are drift, not a gain
        faster = high < 1 - MIN_GAIN and c.latency_ms < baseline.latency_ms
        saves_memory = (objective is not None and objective.memory > 0 and saved >= MIN_MEM_GAIN
                        and low <= 1 + MIN_GAIN)
        if not (faster or saves_memory or not default_fits):
            rejected[c.label] = (f"{c.latency_ms:.4g} ms is not faster than the default "
                                 f"{baseline.latency_ms:.4g} ms beyond noise (paired ratio {median:.3f}, 95% bound "
                                 f"{high:.3f})" + (f" and saves {saved:.0%} memory" if saved > 0 else ""))
            continue
        basis[i] = "fit" if not default_fits else "faster" if faster else "memory"
        why = ("the default does not fit the device memory" if not default_fits else
               f"{baseline.latency_ms / c.latency_ms:.2f}x" if faster else
               f"{saved:.0%} less peak memory ({c.peak_mem_bytes} vs {baseline.peak_mem_bytes} B) "
               f"at latency ratio {median:.3f}")
        if objective is None:
            eligible[i] = (c.latency_ms, why)
            continue
        terms[i] = objective.terms(median, mem_ratio, c.accuracy_loss, changes[i])
        score = sum(terms[i].values())
        default_score = objective.score(1.0, baseline.peak_mem_bytes / base_mem, 0.0, 0)
        if score >= default_score and default_fits:
            rejected[c.label] = (f"pays ({why}) but scores {score:.3f}, not better than the default's "
                                 f"{default_score:.3f} under the weights"
                                 + _memory_note(c.peak_mem_bytes - baseline.peak_mem_bytes, budget))
            continue
        eligible[i] = (score, why)
    verdicts = dict(rejected)
    if not eligible:
        return Decision("rolled_back", "; ".join(f"{k} {v}" for k, v in rejected.items()) or "no candidate to verify",
                        None, verdicts)
    best = min(eligible, key=lambda i: eligible[i][0])
    simpler = _simpler_within_noise(candidates, best, {i: changes[i] for i in eligible if changes[i] < changes[best]},
                                    objective)
    note = ""
    if simpler is not None:
        note = (f"; chosen over {candidates[best].label} ({changes[best]} actions, score {eligible[best][0]:.3f}), "
                f"which is not faster beyond noise with {changes[best] - changes[simpler]} more action(s)")
        best = simpler
    chosen_score = eligible[best][0]
    for i, (sc, why) in eligible.items():
        if i == best:
            continue
        if objective is None:
            lost = ""
        elif sc < chosen_score:     # it scored better, but the simpler plan is not slower beyond noise
            lost = f", score {sc:.3f}: not faster beyond noise than the chosen plan, with more actions"
        else:
            lost = f", score {sc:.3f} vs {chosen_score:.3f}: {_what_lost(terms[i], terms[best])}"
        verdicts[candidates[i].label] = f"eligible, not chosen ({why}{lost})"
    c = candidates[best]
    scored = f", score {eligible[best][0]:.3f}" if objective is not None else ""
    verdicts[c.label] = f"chosen ({eligible[best][1]}{scored})"
    return Decision("adapted", f"{c.label} verified at {c.latency_ms:.4g} ms vs default {baseline.latency_ms:.4g} ms "
                               f"({eligible[best][1]}{scored}), accuracy loss {c.accuracy_loss:.3g}{note}", best,
                    verdicts, basis[best])


def _memory_note(extra_bytes: int, budget: int) -> str:
    """What a plan adds to the default's peak, and its share of the target's memory budget."""
    return f"; memory {bytes_vs_budget(extra_bytes, budget)}" if extra_bytes > 0 else ""


def _what_lost(mine: dict[str, float], chosen: dict[str, float]) -> str:
    """The score terms in which a plan trails the chosen one, largest first."""
    worse = sorted(((mine[k] - chosen[k], k) for k in mine if mine[k] - chosen[k] > 5e-4), reverse=True)
    return ", ".join(f"{k} +{d:.3f}" for d, k in worse) or "ties"


def _simpler_within_noise(candidates: list[Verified], best: int, fewer: dict[int, int], objective: Weights | None
                          ) -> int | None:
    """The plan with the fewest actions among `fewer` that the best-scoring plan does not beat
    beyond noise (paired rounds: every plan ran in each round), with no more loss and, when memory
    counts, no more peak memory: a gain the measurement cannot tell apart is not worth an action
    (and tends not to repeat on another run)."""
    if objective is None:
        return None
    b = candidates[best]
    ok = []
    for i in fewer:
        c = candidates[i]
        _, low, _ = ratio_bounds(b.samples_ms, c.samples_ms)
        if (low <= 1 + MIN_GAIN and c.accuracy_loss <= b.accuracy_loss * 1.1 + 1e-9
                and (objective.memory == 0 or c.peak_mem_bytes <= b.peak_mem_bytes * (1 + MIN_MEM_GAIN))):
            ok.append(i)
    return min(ok, key=lambda i: (fewer[i], i)) if ok else None


MAX_CONFIRMATIONS = 3      # plans confirmed in turn before the default is kept


def decide_stage(s: Settings, backend: Backend, outcome: SearchOutcome, verified: VerifyOutcome,
                 default: onnx.ModelProto | None = None, feed: dict | None = None,
                 timer: PairTimer | None = None, points: list[tuple[Point, dict]] = ()
                 ) -> tuple[Decision, Candidate | None]:
    """The rollback stage's decision: skipped, the default (nothing to verify, with why), or
    decide() on the verified plans under the configured weights, each plan it would adopt then
    confirmed alone with the `default` model on `feed` (decide/confirm.py; `timer`: how the pair
    is timed, None: no confirmation, as on a modeled target). A plan that does not pass its
    confirmation is set aside and decide() runs again, up to MAX_CONFIRMATIONS plans. `points`:
    the shape range's other points (each with one input at its shapes, its weight in the verdict);
    the plan is confirmed at each too (decide/range_check.py) and set aside where it loses. Where
    the default is kept, its latency alone is taken from a confirmation's default or, with none,
    from timing it alone beside itself (`default_alone`): plan.json's figure is then as clean as
    an adopted plan's."""
    if outcome.skipped_reason:
        return Decision("skipped", outcome.skipped_reason, None), None
    d, chosen = _decided(s, backend, outcome, verified, default, feed, timer, points)
    if d.chosen is None and timer is not None and default is not None and feed is not None and verified.baseline.ok:
        d.default_alone = next((c for c in reversed(d.confirmations) if not c.error), None) \
            or confirm(timer, backend, default, default, feed, "default", "kept")
    return d, chosen


def _decided(s: Settings, backend: Backend, outcome: SearchOutcome, verified: VerifyOutcome,
             default: onnx.ModelProto | None, feed: dict | None, timer: PairTimer | None,
             points: list[tuple[Point, dict]]) -> tuple[Decision, Candidate | None]:
    if not verified.plans:
        default, limit = outcome.default, backend.info.memory_limit_bytes
        if outcome.result and outcome.result.pruned.get("memory") and default.peak_mem_bytes > limit:
            lean = outcome.result.leanest or default
            return Decision("default", f"no plan fits the device memory limit: the default needs {default.peak_mem_bytes} B "
                                       f"(limit {limit} B) and all {outcome.result.pruned['memory']} candidates over the "
                                       f"limit were pruned; the leanest ({_plan_words(lean)}) needs {lean.peak_mem_bytes} B: "
                                       f"{_peak_reason(lean.model, backend.info)}; the default is kept but does not fit "
                                       "this device", None), None
        return Decision("default", "the search found no plan predicted to beat the default", None), None
    def again(excluded: dict[int, str]) -> Decision:
        return decide(verified.baseline, verified.candidates, s.accuracy.max_loss, backend.info.memory_limit_bytes,
                      Weights.of(s.weights, s.serving.under_load), [c.changes for c in verified.plans],
                      backend.info.memory_budget, excluded)

    d, excluded, tried = again({}), {}, []
    while d.chosen is not None and timer is not None and default is not None and feed is not None:
        label = verified.candidates[d.chosen].label
        plan = verified.plans[d.chosen].model
        c = confirm(timer, backend, default, plan, feed, label, d.basis)
        tried.append(c)
        across = across_range(timer, backend, default, plan, points, label, c, d.basis) if c.pays and points else None
        if c.pays and (across is None or across.pays):
            d.reason = _confirmed_reason(d, c, tried[:-1]) + (f"; {across.words()}" if across else "")
            d.verdicts[label] += f"; confirmed alone with the default: {c.words()}"
            d.across = across
            break
        excluded[d.chosen] = (across.failure(verified.candidates[d.chosen].latency_ms, verified.baseline.latency_ms)
                              if c.pays else
                              f"paid in verify's rounds ({verified.candidates[d.chosen].latency_ms:.4g} ms vs default "
                              f"{verified.baseline.latency_ms:.4g} ms) but not when timed alone with the default: "
                              f"{c.words()}")
        d = again(excluded)
        if len(tried) >= MAX_CONFIRMATIONS and d.chosen is not None:
            d = Decision("rolled_back", f"{MAX_CONFIRMATIONS} plans paid in verify's rounds and none held when timed alone "
                                        "with the default: " + "; ".join(f"{k} {v}" for k, v in d.verdicts.items()
                                                                          if k in {t.label for t in tried}),
                         None, {**d.verdicts, verified.candidates[d.chosen].label:
                                "eligible, not confirmed (confirmation limit reached)"})
    d.confirmations = tried
    return d, (verified.plans[d.chosen] if d.chosen is not None else None)


def _confirmed_reason(d: Decision, c: Confirmation, failed: list[Confirmation]) -> str:
    """decide()'s reason with the confirmation's figures first (the ones a deployment gets)."""
    head = (f"{c.label} confirmed alone with the default at {c.plan_ms:.4g} ms vs {c.default_ms:.4g} ms "
            f"({c.default_ms / c.plan_ms:.2f}x, paired ratio {c.ratio:.3f}, 95% bound {c.ratio_high:.3f}, "
            f"{c.rounds} rounds)")
    before = "".join(f"; {f.label} paid in verify's rounds but not alone with the default ({f.words()})"
                     for f in failed)
    return f"{head}{before}; in verify's rounds: {d.reason}"


def _plan_words(c: Candidate) -> str:
    return " + ".join(step.kind for step in c.steps) or "the default"


def _peak_reason(model: onnx.ModelProto, info) -> str:
    """Which tensors make the model's planned peak on the target (memory.peak_reason)."""
    infos = tensor_infos(model)
    kernels = group_kernels(model, infos)
    inits = {i.name for i in model.graph.initializer}
    plan = plan_memory(kernels, infos, [i.name for i in model.graph.input if i.name not in inits],
                       model_strategy(model, info.extra.get("memory_strategy", DEFAULT_STRATEGY)),
                       {o.name for o in model.graph.output},
                       streamed_weights=bool(info.extra.get("weights_streamed")))
    return peak_reason(plan, kernels, info.memory_limit_bytes, infos)
