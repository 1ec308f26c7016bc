"""Per-sender payload deadlines from the declared size and each sender's measured rate.

Version 2 gave every payload of a round one 30 s deadline, which caps the model at what a home uplink sends in
30 s. Here the deadline of sender i's payload of b_i bytes is (seconds)::

    r_i  = the sender's measured rate (an EWMA over its past fetches, :class:`RateBook`), else ``assumed_bytes_per_s``
    T_i  = clamp(MARGIN · b_i / r_i,  lo = fetch_timeout_s,  hi = max(fetch_timeout_s, idle + b_i / ρ_min))

with ρ_min = ``min_fetch_bytes_per_s``, the rate floor under which ``transport.fetch_payload`` cuts a stream as
a slowloris (``TOO_SLOW``). So a small payload keeps the old deadline, a large one gets time in proportion to
its size, a sender measured slow gets more time (never more than the floor allows), and a trickling sender is
still cut by the floor whatever its deadline. When T_i passes while the stream is still progressing faster than
ρ_min, the fetch is given one extension from the rate measured in this very fetch (:func:`extended_deadline_s`)
and resumes after its verified chunks: a slow but honest sender is retried, not dropped.

Pure functions and one small bounded table; no I/O.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict

__all__ = ["DEFAULT_ASSUMED_BYTES_PER_S", "MARGIN", "RateBook", "deadline_ceiling_s", "extended_deadline_s",
           "fetch_deadline_s"]

logger = logging.getLogger(__name__)

#: Rate assumed for a sender never measured, in bytes per second (1 MiB/s ≈ 8.4 Mbit/s: a 20 Mbit/s home uplink
#: shared by about two receivers at once).
DEFAULT_ASSUMED_BYTES_PER_S = float(1 << 20)
#: Slack on the expected transfer time (dimensionless): a sender may run at half its measured rate.
MARGIN = 2.0
#: Weight of the newest measurement in a sender's rate EWMA.
EWMA_WEIGHT = 0.5
#: Senders whose rates are remembered (least recently measured evicted first).
MAX_TRACKED_SENDERS = 1024


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise ValueError(f"{name} must be finite and > 0; got {name}={value!r}")


def deadline_ceiling_s(payload_bytes: int, *, fetch_timeout_s: float, idle_timeout_s: float,
                       min_bytes_per_s: float) -> float:
    """The most seconds any answer of ``payload_bytes`` bytes is given: ``max(fetch_timeout_s, idle + b / ρ_min)``.

    The rate floor cuts a slower stream anyway, so no deadline (:func:`fetch_deadline_s`) goes past this, and an
    upload cap that keeps every receiver's stream at the floor is enough (``swarm.upload.upload_cap_warning``).

    Args:
        payload_bytes: b, the answer's size in bytes (≥ 0).
        fetch_timeout_s: the floor of every deadline, in seconds.
        idle_timeout_s: the fetch's idle allowance, in seconds.
        min_bytes_per_s: ρ_min, the slowloris rate floor, in bytes per second (> 0).

    Returns:
        Seconds.
    """
    return max(fetch_timeout_s, idle_timeout_s + payload_bytes / min_bytes_per_s)


def fetch_deadline_s(payload_bytes: int, rate_bytes_per_s: float | None, *, fetch_timeout_s: float,
                     idle_timeout_s: float, min_bytes_per_s: float,
                     assumed_bytes_per_s: float = DEFAULT_ASSUMED_BYTES_PER_S) -> float:
    """T_i, the seconds a sender's payload may take (formula in the module docstring).

    Args:
        payload_bytes: b_i, the declared size, in bytes (≥ 0).
        rate_bytes_per_s: r_i, the sender's measured rate in bytes per second, or None if never measured.
        fetch_timeout_s: the floor of every deadline, in seconds.
        idle_timeout_s: the fetch's idle allowance, in seconds.
        min_bytes_per_s: ρ_min, the slowloris rate floor, in bytes per second.
        assumed_bytes_per_s: r_i of a sender never measured, in bytes per second.

    Returns:
        T_i in seconds, in ``[fetch_timeout_s, max(fetch_timeout_s, idle + b_i / ρ_min)]``.

    Raises:
        ValueError: a limit is not finite and > 0, or ``payload_bytes`` is negative (local bugs).
    """
    _check_positive(fetch_timeout_s=fetch_timeout_s, idle_timeout_s=idle_timeout_s,
                    min_bytes_per_s=min_bytes_per_s, assumed_bytes_per_s=assumed_bytes_per_s)
    if payload_bytes < 0:
        raise ValueError(f"payload_bytes must be >= 0, got {payload_bytes}")
    rate = assumed_bytes_per_s if rate_bytes_per_s is None or not rate_bytes_per_s > 0 else rate_bytes_per_s
    rate = max(float(rate), float(min_bytes_per_s))
    ceiling = deadline_ceiling_s(payload_bytes, fetch_timeout_s=fetch_timeout_s, idle_timeout_s=idle_timeout_s,
                                 min_bytes_per_s=min_bytes_per_s)
    return min(max(fetch_timeout_s, MARGIN * payload_bytes / rate), ceiling)


def extended_deadline_s(payload_bytes: int, received_bytes: int, elapsed_s: float, *, idle_timeout_s: float,
                        min_bytes_per_s: float, kept_bytes: int | None = None) -> float | None:
    """The one extension of a deadline reached while the payload still streams: total seconds, or None.

    With ρ = received / elapsed the rate of this fetch so far and k the bytes a resumed request starts after,
    the new deadline (seconds from the first request) is ``min(elapsed + MARGIN · (b − k) / ρ, idle + b / ρ_min)``;
    None when nothing arrived, when ρ ≤ ρ_min (a slowloris is not waited for) or when the floor's bound has
    already passed. k is the verified chunks only: the stream cut at the deadline loses the unfinished chunk's
    bytes (up to 1 MiB), which the resumed request reads again (counting them as kept, as until this change,
    left a 3 MB payload at 97 KB/s 0.9 MB and 9 s short of a 3 s extension, measured in ``simulate``).

    Args:
        payload_bytes: b, the declared size, in bytes.
        received_bytes: the body bytes read so far (verified chunks and the unfinished one), in bytes.
        elapsed_s: seconds since the first request for this payload.
        idle_timeout_s: the fetch's idle allowance, in seconds.
        min_bytes_per_s: ρ_min, in bytes per second.
        kept_bytes: k, the bytes kept when the fetch resumes (``ChunkVerifier.resume_offset()``), in bytes;
            None: ``received_bytes``.

    Raises:
        ValueError: a limit is not finite and > 0 (a local bug).
    """
    _check_positive(idle_timeout_s=idle_timeout_s, min_bytes_per_s=min_bytes_per_s)
    if received_bytes <= 0 or elapsed_s <= 0:
        return None
    rate = received_bytes / elapsed_s
    if rate <= min_bytes_per_s:
        return None
    kept = received_bytes if kept_bytes is None else min(kept_bytes, received_bytes)
    ceiling = idle_timeout_s + payload_bytes / min_bytes_per_s
    extended = min(elapsed_s + MARGIN * max(0, payload_bytes - kept) / rate, ceiling)
    return extended if extended > elapsed_s else None


class RateBook:
    """The measured payload rate of each sender (bytes per second), an EWMA over its fetches.

    ``rate ← w · measured + (1 − w) · rate`` with w = :data:`EWMA_WEIGHT`; at most :data:`MAX_TRACKED_SENDERS`
    senders (least recently measured evicted). One per peer process, kept across rounds; nothing else.
    """

    def __init__(self, max_senders: int = MAX_TRACKED_SENDERS) -> None:
        """Args: max_senders: size of the table (senders, > 0).

        Raises:
            ValueError: ``max_senders`` is not a positive int.
        """
        if isinstance(max_senders, bool) or not isinstance(max_senders, int) or max_senders <= 0:
            raise ValueError(f"max_senders must be a positive int, got {max_senders!r}")
        self.max_senders = max_senders
        self._rates: OrderedDict[str, float] = OrderedDict()

    def rate(self, sender: str) -> float | None:
        """The sender's rate in bytes per second, or None if never measured."""
        return self._rates.get(sender)

    def record(self, sender: str, nbytes: int, seconds: float) -> None:
        """Fold one measurement (``nbytes`` received in ``seconds``) into the sender's rate; ignored if empty."""
        if nbytes <= 0 or not seconds > 0 or not math.isfinite(seconds):
            return
        measured = nbytes / seconds
        old = self._rates.pop(sender, None)
        self._rates[sender] = measured if old is None else EWMA_WEIGHT * measured + (1 - EWMA_WEIGHT) * old
        while len(self._rates) > self.max_senders:
            self._rates.popitem(last=False)
