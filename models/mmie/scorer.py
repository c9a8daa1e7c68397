"""The MMIE-Score judge network: a small image encoder and a scoring head over MiniLM vectors.

"image_encoder": images (N, 1, 16, 16) float32 in [0, 1] -> embedding (N, 64) float32.

"scorer" compares an answer with the reference step by step. Inputs (B = items, S = steps):
query (B, 384); ref_text, ans_text (B, S, 384) frozen MiniLM step embeddings; ref_image,
ans_image (B, S, 64) image embeddings; ref_mask, ans_mask, ref_has_image, ans_has_image
(B, S) float32 in {0, 1}; category (B,) int64. Outputs: logits (B, 7) over the scores 0..6
and coverage (B, S), how well each reference step is matched by some answer step (-1 on
padding). Features it pools (per reference step: best text match in a learned projection and
in raw MiniLM space, image match of the softly aligned answer step, order of the alignment,
whether a soft one-to-one Sinkhorn pairing on raw cosines finds it a partner and how close;
per answer step: text-image grounding; step and image counts; the final step's match) feed a
category-conditioned MLP.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from edgekit.models.mmie.embed import DIM as TEXT_DIM
from edgekit.models.mmie.rubrics import CATEGORIES, SCORE_MAX, SCORE_MIN

IMAGE_DIM = 64
SCORES = SCORE_MAX - SCORE_MIN + 1  # 7 classes, scores 0..6
RAW_CUTS = (0.5, 0.9, 0.95, 0.97, 0.98, 0.99)  # raw MiniLM cosine levels counted
FEATURES = 21 + 3 * len(RAW_CUTS)
SINKHORN_ITERS = 10
PAIR_TEMPERATURE = 30.0  # fixed: the pairing reads raw MiniLM cosines, nothing learned
PAIR_SLACK = 15.0  # a step stays unpaired rather than take a partner below cosine 0.5
_NEG = -2.0  # below any cosine: masked entries never win a max


class ImageEncoder(nn.Module):
    """Two conv blocks and a linear layer: (N, 1, 16, 16) -> (N, 64)."""

    def __init__(self, dim: int = IMAGE_DIM) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),  # (N, 16, 8, 8)
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),  # (N, 32, 4, 4)
        )
        self.fc = nn.Linear(32 * 4 * 4, dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(images).flatten(1))  # (N, 64)


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp(min=1e-6)


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # (B,)


def _masked_min(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # 1.0 (a perfect match) when nothing is unmasked
    return torch.where(mask > 0, x, torch.ones_like(x)).amin(-1)  # (B,)


def sinkhorn_pairs(
    scores: torch.Tensor, ans_mask: torch.Tensor, ref_mask: torch.Tensor, slack: float
) -> torch.Tensor:
    """Soft one-to-one pairing of answer and reference steps with an "unpaired" slot each side.

    scores (B, Sa, Sr) pair scores, masks (B, S) in {0, 1}, ``slack`` the score of staying
    unpaired. Log-domain Sinkhorn (SuperGlue's optimal transport with a dustbin): every real
    step carries mass 1, each dustbin the other side's step count. Returns (B, Sa, Sr), the
    mass answer step a sends to reference step r (about 1 for a pair, 0 otherwise)."""
    b, sa, sr = scores.shape
    one = torch.ones_like(ans_mask[:, :1])  # (B, 1)
    top = torch.cat([scores, slack * torch.ones_like(scores[:, :, :1])], 2)  # (B, Sa, Sr+1)
    bottom = slack * torch.ones_like(top[:, :1, :])  # (B, 1, Sr+1)
    couplings = torch.cat([top, bottom], 1)  # (B, Sa+1, Sr+1)
    rows, cols = torch.cat([ans_mask, one], 1), torch.cat([ref_mask, one], 1)
    valid = rows.unsqueeze(2) * cols.unsqueeze(1)
    couplings = torch.where(valid > 0, couplings, torch.full_like(couplings, -1e4))
    n_ans, n_ref = ans_mask.sum(-1, keepdim=True), ref_mask.sum(-1, keepdim=True)  # (B, 1)
    log_mu = torch.log(torch.cat([ans_mask, n_ref], 1).clamp(min=1e-9))  # (B, Sa+1)
    log_nu = torch.log(torch.cat([ref_mask, n_ans], 1).clamp(min=1e-9))  # (B, Sr+1)
    u, v = torch.zeros_like(log_mu), torch.zeros_like(log_nu)
    for _ in range(SINKHORN_ITERS):
        u = log_mu - torch.logsumexp(couplings + v.unsqueeze(1), dim=2)
        v = log_nu - torch.logsumexp(couplings + u.unsqueeze(2), dim=1)
    plan = torch.exp(couplings + u.unsqueeze(2) + v.unsqueeze(1))  # (B, Sa+1, Sr+1)
    return plan[:, :sa, :sr] * valid[:, :sa, :sr]


class ScorerHead(nn.Module):
    """Step-aligned comparison of answer and reference, then an MLP to 7 score logits."""

    def __init__(self, dim: int = 64, hidden: int = 96) -> None:
        super().__init__()
        self.text_proj = nn.Linear(TEXT_DIM, dim)
        self.image_proj = nn.Linear(IMAGE_DIM, dim)
        self.ground_text = nn.Linear(TEXT_DIM, dim)
        self.ground_image = nn.Linear(IMAGE_DIM, dim)
        self.align_temperature = nn.Parameter(torch.tensor(10.0))
        self.thresholds = nn.Parameter(torch.tensor([0.8, 0.8, 0.5]))  # soft-count cut-offs
        width = FEATURES * (1 + len(CATEGORIES)) + len(CATEGORIES)
        self.mlp = nn.Sequential(
            nn.Linear(width, hidden),
            nn.GELU(),
            nn.Linear(hidden, hidden),
            nn.GELU(),
            nn.Linear(hidden, SCORES),
        )

    def features(
        self,
        query: torch.Tensor,
        ref_text: torch.Tensor,
        ref_image: torch.Tensor,
        ref_mask: torch.Tensor,
        ref_has_image: torch.Tensor,
        ans_text: torch.Tensor,
        ans_image: torch.Tensor,
        ans_mask: torch.Tensor,
        ans_has_image: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, FEATURES) pooled comparison features and the (B, S) reference coverage."""
        pair = ans_mask.unsqueeze(2) * ref_mask.unsqueeze(1)  # (B, Sa, Sr)
        ta, tr = _unit(self.text_proj(ans_text)), _unit(self.text_proj(ref_text))  # (B, S, d)
        text_sim = ta @ tr.transpose(1, 2)  # (B, Sa, Sr)
        raw_sim = _unit(ans_text) @ _unit(ref_text).transpose(1, 2)  # (B, Sa, Sr)
        ia, ir = _unit(self.image_proj(ans_image)), _unit(self.image_proj(ref_image))
        image_sim = ia @ ir.transpose(1, 2)  # (B, Sa, Sr)
        text_sim_m = torch.where(pair > 0, text_sim, torch.full_like(text_sim, _NEG))
        coverage = text_sim_m.amax(1)  # (B, Sr)
        raw_cov = torch.where(pair > 0, raw_sim, torch.full_like(raw_sim, _NEG)).amax(1)
        # soft alignment of each reference step to answer steps, by learned text similarity
        weights = torch.softmax(self.align_temperature * text_sim_m, dim=1) * pair  # (B, Sa, Sr)
        weights = weights / weights.sum(1, keepdim=True).clamp(min=1e-6)
        # soft one-to-one pairing (Sinkhorn): which reference steps have a partner, and how close
        plan = sinkhorn_pairs(PAIR_TEMPERATURE * raw_sim, ans_mask, ref_mask, PAIR_SLACK)
        paired = plan.sum(1)  # (B, Sr) about 1 where a reference step has a partner
        pair_raw = (plan * raw_sim).sum(1) / paired.clamp(min=1e-6)  # (B, Sr)
        aligned_has_image = (weights * ans_has_image.unsqueeze(2)).sum(1)  # (B, Sr)
        image_match = (weights * image_sim * ans_has_image.unsqueeze(2)).sum(1)  # (B, Sr)
        image_pair = ref_has_image * aligned_has_image  # (B, Sr)
        image_match = image_match / aligned_has_image.clamp(min=1e-6)
        positions = torch.arange(ans_mask.shape[1], dtype=ans_text.dtype).view(1, -1, 1)
        expected_pos = (weights * positions).sum(1)  # (B, Sr)
        next_mask = ref_mask[:, 1:] * ref_mask[:, :-1]
        disorder = (F.relu(expected_pos[:, :-1] - expected_pos[:, 1:]) * next_mask).sum(-1)
        last = ref_mask - torch.cat([ref_mask[:, 1:], torch.zeros_like(ref_mask[:, :1])], 1)
        final_match = (coverage * last).sum(-1)  # (B,)
        final_raw = (raw_cov * last).sum(-1)
        ground = (_unit(self.ground_image(ans_image)) * _unit(self.ground_text(ans_text))).sum(
            -1
        )  # (B, Sa)
        ground_mask = ans_has_image * ans_mask
        answer_mean = _unit((ans_text * ans_mask.unsqueeze(-1)).sum(1))  # (B, 384)
        relevance = (answer_mean * _unit(query)).sum(-1)
        n_ref, n_ans = ref_mask.sum(-1), ans_mask.sum(-1)
        sharp = 20.0
        low_cov = (torch.sigmoid(sharp * (self.thresholds[0] - coverage)) * ref_mask).sum(-1)
        low_img = (torch.sigmoid(sharp * (self.thresholds[1] - image_match)) * image_pair).sum(-1)
        low_ground = (torch.sigmoid(sharp * (self.thresholds[2] - ground)) * ground_mask).sum(-1)
        feats = torch.stack(
            [
                _masked_min(coverage, ref_mask),
                _masked_mean(coverage, ref_mask),
                _masked_min(raw_cov, ref_mask),
                _masked_mean(raw_cov, ref_mask),
                _masked_min(image_match, image_pair),
                _masked_mean(image_match, image_pair),
                _masked_min(ground, ground_mask),
                _masked_mean(ground, ground_mask),
                final_match,
                final_raw,
                disorder,
                n_ref - n_ans,
                ans_has_image.sum(-1) / n_ans.clamp(min=1.0),
                ref_has_image.sum(-1) / n_ref.clamp(min=1.0),
                relevance,
                low_cov,
                low_img,
                low_ground,
                n_ref / 6.0,
                ((1.0 - paired) * ref_mask).sum(-1),
                _masked_min(pair_raw, ref_mask * (paired > 0.5).to(ref_mask.dtype)),
            ]
            + [
                ((pair_raw < cut) & (paired > 0.5)).to(ref_mask.dtype).mul(ref_mask).sum(-1)
                for cut in RAW_CUTS
            ]
            + [((raw_cov < cut).to(ref_mask.dtype) * ref_mask).sum(-1) for cut in RAW_CUTS]
            + [(final_raw < cut).to(ref_mask.dtype) for cut in RAW_CUTS],
            dim=-1,
        )  # (B, FEATURES)
        coverage_out = torch.where(ref_mask > 0, coverage, -torch.ones_like(coverage))
        return feats, coverage_out

    def forward(
        self,
        query: torch.Tensor,
        ref_text: torch.Tensor,
        ref_image: torch.Tensor,
        ref_mask: torch.Tensor,
        ref_has_image: torch.Tensor,
        ans_text: torch.Tensor,
        ans_image: torch.Tensor,
        ans_mask: torch.Tensor,
        ans_has_image: torch.Tensor,
        category: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        feats, coverage = self.features(
            query,
            ref_text,
            ref_image,
            ref_mask,
            ref_has_image,
            ans_text,
            ans_image,
            ans_mask,
            ans_has_image,
        )
        classes = torch.arange(len(CATEGORIES), dtype=category.dtype)
        onehot = (category.unsqueeze(1) == classes).to(feats.dtype)  # (B, 3)
        crossed = (feats.unsqueeze(2) * onehot.unsqueeze(1)).flatten(1)  # (B, FEATURES * 3)
        logits = self.mlp(torch.cat([feats, crossed, onehot], dim=-1))  # (B, 7)
        return logits, coverage


SCORER_INPUTS = (
    "query",
    "ref_text",
    "ref_image",
    "ref_mask",
    "ref_has_image",
    "ans_text",
    "ans_image",
    "ans_mask",
    "ans_has_image",
    "category",
)
