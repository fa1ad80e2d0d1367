"""`python -m benchmark.bench losses`: forward+backward time of every loss vs plain autograd.

For each batch size (B=80 as P=16 × K=5, B=256 and B=1024 as K=4) at D=512, every loss is timed
against a plain autograd implementation of the same loss, measured in the same run and checked
to give the same value: the maths written directly with autograd (no custom backward, no
similarity source), and for the multi-similarity loss a loop over anchors as in its paper's code.
Circle loss is also timed against the widespread open-source pattern (global upper-triangle
pairs taken by boolean indexing, one logsumexp over all of them, autograd backward), which is a
different reduction and so is not value-checked.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import losses as L
from benchmark.bench.timing import bench_parser, machine, median_seconds

INF = torch.inf
BATCHES = {80: 5, 256: 4, 1024: 4}  # B -> K
MIN_CLASSES = 100  # class-level losses get max(100, P) classes, as a small training set has


def _pairs(x: Tensor, y: Tensor, normalize: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    x = F.normalize(x, dim=1) if normalize else x
    same = y[:, None] == y[None, :]
    return x @ x.T, same & ~torch.eye(len(y), dtype=torch.bool), ~same


def _circle(sim: Tensor, pos: Tensor, neg: Tensor, m: float, g: float) -> Tensor:
    ap, an = (1 + m - sim).clamp_min(0).detach(), (sim + m).clamp_min(0).detach()
    lp = torch.logsumexp(torch.where(pos, -g * ap * (sim - 1 + m), -INF), 1)
    ln = torch.logsumexp(torch.where(neg, g * an * (sim - m), -INF), 1)
    return F.softplus(lp + ln).mean()


def plain_circle(mod, x, y):
    return _circle(*_pairs(x, y), mod.m, mod.gamma)


def open_source_circle(mod, x, y):
    x = F.normalize(x, dim=1)
    sim = (x @ x.T).view(-1)
    same = y[:, None] == y[None, :]
    sp, sn = sim[same.triu(1).view(-1)], sim[(~same).triu(1).view(-1)]
    m, g = mod.m, mod.gamma
    ap, an = (1 + m - sp.detach()).clamp_min(0), (sn.detach() + m).clamp_min(0)
    lp = torch.logsumexp(-ap * (sp - 1 + m) * g, 0)
    return F.softplus(lp + torch.logsumexp(an * (sn - m) * g, 0))


def plain_unified(mod, x, y):
    sim, pos, neg = _pairs(x, y)
    lp = torch.logsumexp(torch.where(pos, -mod.gamma * sim, -INF), 1)
    ln = torch.logsumexp(torch.where(neg, mod.gamma * (sim + mod.m), -INF), 1)
    return F.softplus(lp + ln).mean()


def plain_triplet(mod, x, y):
    sim, pos, neg = _pairs(x, y)
    hardest_pos = torch.where(pos, sim, INF).amin(1)
    return F.relu(torch.where(neg, sim, -INF).amax(1) - hardest_pos + mod.margin).mean()


def plain_multi_similarity(mod, x, y):
    sim, pos, neg = _pairs(x, y)
    total = x.new_zeros(())
    for i in range(len(y)):  # the paper's code loops over anchors
        s_p, s_n = sim[i][pos[i]], sim[i][neg[i]]
        s_n_kept = s_n[s_n + mod.epsilon > s_p.min()]
        s_p_kept = s_p[s_p - mod.epsilon < s_n.max()]
        if len(s_p_kept) and len(s_n_kept):
            p = torch.log1p(torch.exp(-mod.alpha * (s_p_kept - mod.base)).sum()) / mod.alpha
            n = torch.log1p(torch.exp(mod.beta * (s_n_kept - mod.base)).sum()) / mod.beta
            total = total + p + n
    return total / len(y)


def plain_lifted(mod, x, y):
    sim, pos, neg = _pairs(x, y)
    lse = torch.logsumexp(torch.where(neg, mod.margin + sim, -INF), 1)
    j = torch.logaddexp(lse[:, None], lse[None, :]) - sim
    return F.relu(j)[pos].square().sum() / (2 * pos.sum())


def plain_npair(mod, x, y):
    sim, pos, neg = _pairs(x, y, normalize=False)
    lse = torch.logsumexp(torch.where(neg, sim, -INF), 1)
    return F.softplus(lse[:, None] - sim)[pos].mean() + mod.l2_reg * x.square().sum(1).mean()


def plain_contrastive(mod, x, y):
    sim, pos, neg = _pairs(x, y)
    return F.relu(mod.pos_margin - sim[pos]).mean() + F.relu(sim[neg] - mod.neg_margin).mean()


def _cosine_logits(mod, x):
    return F.normalize(x, dim=1) @ F.normalize(mod.source.proxies, dim=1).T


def plain_softmax(mod, x, y):
    return F.cross_entropy(mod.classifier(x), y)


def plain_normface(mod, x, y):
    return F.cross_entropy(mod.scale * _cosine_logits(mod, x), y)


def plain_cosface(mod, x, y):
    cos = _cosine_logits(mod, x)
    return F.cross_entropy(mod.s * (cos - mod.m * F.one_hot(y, cos.shape[1])), y)


def plain_arcface(mod, x, y):
    cos = _cosine_logits(mod, x)
    theta = torch.acos(cos.clamp(-1 + 1e-7, 1 - 1e-7))
    target = torch.where(
        theta + mod.m < torch.pi, torch.cos(theta + mod.m), cos - mod.m * math.sin(mod.m)
    )
    return F.cross_entropy(mod.s * torch.where(F.one_hot(y, cos.shape[1]).bool(), target, cos), y)


def plain_circle_proxies(mod, x, y):
    sim = _cosine_logits(mod, x)
    pos = F.one_hot(y, sim.shape[1]).bool()
    return _circle(sim, pos, ~pos, mod.m, mod.gamma)


def plain_center(mod, x, y):
    center = 0.5 * (x - mod.centers[y]).square().sum(1).mean()
    return F.cross_entropy(mod.softmax.classifier(x), y) + mod.lambda_ * center


def plain_copernican(mod, x, y):
    """Eq. 1 of Pal & Savvides on raw features: planet 1 - cos, sun hinge [cos - β]₊."""
    planet = 1 - F.cosine_similarity(x, mod.planets[y], dim=1, eps=1e-12)
    sun = F.cosine_similarity(x, x.detach().mean(0, keepdim=True), dim=1, eps=1e-12)
    copernican = planet.mean() + (sun - mod.beta).clamp_min(0).mean()
    return F.cross_entropy(mod.softmax.classifier(x), y) + mod.lambda_ * copernican


def pml_circle() -> Callable | None:
    """pytorch-metric-learning's CircleLoss (m=0.25, γ=256) as a peer, None where it is absent."""
    try:
        from pytorch_metric_learning.losses import CircleLoss as PMLCircleLoss
    except ImportError:
        return None
    peer = PMLCircleLoss(m=0.25, gamma=256)
    return lambda mod, x, y: peer(x, y)


def _random_centres(module: nn.Module) -> nn.Module:
    """Centres start at zero; random ones make the timed arithmetic representative."""
    for buffer in module.buffers():
        buffer.normal_()
    return module


def cases(c: int, dim: int) -> list[tuple[str, Callable[[], nn.Module], Callable]]:
    """(name, loss factory, plain implementation of the same loss) for c classes; the
    pytorch-metric-learning peer only where it is installed."""
    peer = pml_circle()
    circle = lambda: L.CircleLoss(m=0.25, gamma=256)  # noqa: E731
    return [
        ("CircleLoss", circle, plain_circle),
        ("CircleLoss/open-source", circle, open_source_circle),
        *([("CircleLoss/pytorch-metric-learning", circle, peer)] if peer else []),
        (
            "CircleLoss/ClassProxies",
            lambda: L.CircleLoss(0.25, 256, L.ClassProxies(c, dim)),
            plain_circle_proxies,
        ),
        ("UnifiedLoss", lambda: L.UnifiedLoss(m=0.25, gamma=64), plain_unified),
        ("TripletLoss", lambda: L.TripletLoss(margin=0.2), plain_triplet),
        ("MultiSimilarityLoss", L.MultiSimilarityLoss, plain_multi_similarity),
        ("LiftedStructureLoss", L.LiftedStructureLoss, plain_lifted),
        ("NPairLoss", L.NPairLoss, plain_npair),
        ("ContrastiveLoss", L.ContrastiveLoss, plain_contrastive),
        ("SoftmaxLoss", lambda: L.SoftmaxLoss(c, dim), plain_softmax),
        ("NormFaceLoss", lambda: L.NormFaceLoss(c, dim), plain_normface),
        ("CosFaceLoss", lambda: L.CosFaceLoss(c, dim), plain_cosface),
        ("ArcFaceLoss", lambda: L.ArcFaceLoss(c, dim), plain_arcface),
        ("CenterLoss", lambda: _random_centres(L.CenterLoss(c, dim, lambda_=0.01)), plain_center),
        (
            "CopernicanLoss",
            lambda: _random_centres(L.CopernicanLoss(c, dim, 0.1, -0.5)),
            plain_copernican,
        ),
    ]


def _step(module: nn.Module, x: Tensor, loss: Callable[[], Tensor]) -> Callable[[], None]:
    def step() -> None:
        x.grad = None
        module.zero_grad(set_to_none=True)
        loss().backward()

    return step


def main(argv: list[str] | None = None) -> None:
    parser = bench_parser("losses", __doc__)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=list(BATCHES))
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    parser.add_argument("--rounds", type=int, default=5, help="alternating timing rounds")
    parser.add_argument(
        "--threads", type=int, default=0, help="torch threads (0: torch's default, one per core)"
    )
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    if args.threads:  # 1 thread is steadier on a loaded machine: no OpenMP barrier stalls
        torch.set_num_threads(args.threads)
    load = os.getloadavg()[0]  # other processes on the machine skew both columns
    print(
        f"forward+backward median, D={args.dim}, torch threads={torch.get_num_threads()}, "
        f"load average {load:.1f}"
    )
    print(machine())
    print("ours: this package (centre/planet updates included); plain: same loss, autograd; "
          "/pytorch-metric-learning: its CircleLoss as the plain column")  # fmt: skip
    if pml_circle() is None:
        print("pytorch-metric-learning not installed: its peer is skipped "
              "(pip install 'circlebench[bench]')")  # fmt: skip
    print(f"{'loss':<36}{'B':>6}{'ours ms':>10}{'plain ms':>10}{'plain/ours':>12}  value")
    for batch in args.batch_sizes:
        k = BATCHES.get(batch, 4)
        labels = torch.arange(batch // k).repeat_interleave(k)
        x = torch.randn(len(labels), args.dim, requires_grad=True)
        repeat = max(3, 800 // batch)  # small batches are noisy; take more samples
        for name, factory, plain in cases(max(MIN_CLASSES, batch // k), args.dim):
            if args.only not in name:
                continue
            module = factory()
            with torch.no_grad():  # value check in eval mode: no centre updates in between
                ours_value = module.eval()(x, labels)
                plain_value = plain(module, x, labels)
            module.train()
            close = torch.allclose(ours_value, plain_value, rtol=1e-4, atol=1e-5)
            verdict = "other reduction" if name.endswith("open-source") else "same value"
            if not close and not name.endswith("open-source"):
                verdict = f"DIFFERS: {ours_value.item():.6g} vs {plain_value.item():.6g}"
            # Alternating rounds of ours and plain, so that both see the same load.
            losses = (module, partial(plain, module))
            steps = [_step(module, x, partial(f, x, labels)) for f in losses]
            rounds = [[median_seconds(s, warmup=1, repeat=repeat) for s in steps]
                      for _ in range(args.rounds)]  # fmt: skip
            ours_s, plain_s = (statistics.median(t) for t in zip(*rounds, strict=True))
            print(
                f"{name:<36}{len(labels):>6}{ours_s * 1e3:>10.3f}{plain_s * 1e3:>10.3f}"
                f"{plain_s / ours_s:>11.2f}x  {verdict}",
                flush=True,
            )
