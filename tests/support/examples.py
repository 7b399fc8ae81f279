"""How many examples a property test tries, in proportion to the run's Hypothesis profile.

`make test` runs the `streamshop` profile: each property test's own count (Hypothesis's 100
where it names none).  `make test-fast`, the development tier, runs `streamshop-fast`: a quarter
of each count, never fewer than ten (or the count itself when it is lower), so a change is tried
against every property within the fast tier's minutes and against all the examples by the full
run.  A test names its count as `max_examples=examples(300)`.
"""

from __future__ import annotations

import hypothesis

FULL = 100  # the `streamshop` profile's default, Hypothesis's own
FAST = 25  # the `streamshop-fast` profile's default

hypothesis.settings.register_profile("streamshop", deadline=None, max_examples=FULL)
hypothesis.settings.register_profile("streamshop-fast", deadline=None, max_examples=FAST)


def examples(count: int) -> int:
    """`count` scaled as the loaded profile scales Hypothesis's default."""
    scaled = count * hypothesis.settings.default.max_examples // FULL
    return max(scaled, min(count, 10))
