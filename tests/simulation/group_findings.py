"""What the simulation found in groups (docs/simulation.md, "What it found", findings 19 and 20), both fixed
in the product: ``FAILING`` lists the fixed seeds that fail on each catalog because of a finding still open
(``test_fixed_seeds.py`` marks them as strict expected failures): none now. Seeds 9, 36 and 68 (declared
catalog: returns version 2's group) and 50 (``GROUPS``) showed them; ``test_groups.py`` runs them.

Finding 19: the Supervisor's recovery of a step of a group (``transitions.groups._recover_group``) counted a
failure when the step's service's breaker wanted a trial call (open past its interval, or a trial call
overdue), where the recovery of a single step gives the task back uncounted: so an outage of the service put
an order in Error through a group ("the Supervisor put step ... in Error after 2 attempt(s) that timed out
with the breaker closed (of 3); the policy needs 3"). The step now goes again at once to carry the trial call,
uncounted.

Finding 20: the same recovery held a step of a group that waits for its callback (its service took the call,
202) for its breaker, uncounted, where the policy counts such a timeout whatever the breaker (a single step's
callback wait is never held: the service answered). So the step got more attempts than the policy allows
("the Supervisor asked for step charge-payment of a group again after 2 timeouts the policy counts ... the
policy puts it in Error at 2"). A step that waits for its callback now counts.
"""

from __future__ import annotations

FAILING: dict[str | None, frozenset[int]] = {None: frozenset(), "groups": frozenset()}
# The seeds that showed findings 19 and 20, by catalog (None: the declared one).
SHOWED: dict[str | None, tuple[int, ...]] = {None: (9, 36, 68), "groups": (50,)}
