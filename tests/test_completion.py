"""The completion check shared by the RL safe mask and the heuristics' `primary_safe` retry: what it keeps really
leaves a worst-fit completion, its shortcut never changes the answer, and it never empties a row that had room."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.placement.completion import completion_mask


def worst_fit_completes(free: np.ndarray, rest: np.ndarray) -> bool:
    free = free.astype(np.int64).copy()
    for s in sorted(rest, reverse=True):
        j = int(np.argmax(free))
        if free[j] < s:
            return False
        free[j] -= s
    return True


@st.composite
def cases(draw):
    k = draw(st.integers(1, 3))
    d = draw(st.integers(1, 5))
    cap = draw(st.integers(10, 60))
    used = np.array(draw(st.lists(st.integers(0, cap), min_size=k * d, max_size=k * d))).reshape(k, d)
    free = cap - used
    size = draw(st.integers(1, cap))
    rest = np.array(draw(st.lists(st.integers(1, cap), max_size=8)), dtype=np.int64)
    return free, size, rest


@settings(max_examples=300, deadline=None)
@given(cases())
def test_kept_devices_leave_a_worst_fit_completion(case) -> None:
    free, size, rest = case
    room = free >= size
    got = completion_mask(free, size, rest, room)
    assert got.shape == room.shape and not (got & ~room).any()  # never a device without room
    for lane in range(free.shape[0]):
        want = np.array([room[lane, d] and worst_fit_completes(free[lane] - size * (np.arange(free.shape[1]) == d), rest)
                         for d in range(free.shape[1])])
        if want.any():
            assert np.array_equal(got[lane], want), (free[lane], size, rest)  # exact: the shortcut changes nothing
        else:
            assert np.array_equal(got[lane], room[lane])  # nothing passes: the plain room mask comes back


def test_nothing_left_to_place_keeps_the_room_mask() -> None:
    room = np.array([[True, False, True]])
    assert completion_mask(np.array([[5, 1, 9]]), 3, np.array([], dtype=np.int64), room) is room


def test_a_move_that_strands_the_largest_table_is_masked() -> None:
    room = np.array([[True, True]])
    # free 10 and 10, a table of 5, then 6 and 5: either device leaves 6 | 5 + 5
    assert completion_mask(np.array([[10, 10]]), 5, np.array([6, 5]), room).tolist() == [[True, True]]
    # free 10 and 6: on d0 the rest fits (6 -> d1, 5 -> d0); on d1 only 1 is left there and 10 - 6 = 4 < 5
    assert completion_mask(np.array([[10, 6]]), 5, np.array([6, 5]), room).tolist() == [[True, False]]
    # the rest 6 and 6 fits after no move (15 free, 17 needed): the room mask comes back
    assert completion_mask(np.array([[10, 10]]), 5, np.array([6, 6]), room).tolist() == [[True, True]]


def test_the_check_is_charged_to_a_work_budget_by_the_rows_it_packs() -> None:
    """A search on a work budget pays for the check (it was most of the wall time of tight tiered solves): more
    lanes or more tables still to pack cost more work, and a check its shortcut skips costs none."""
    from shardopt.core.work import metered

    free = np.full((1, 8), 100, dtype=np.int64)
    room = np.ones((1, 8), dtype=bool)

    def units(free: np.ndarray, rest: list[int], room: np.ndarray) -> float:
        with metered() as meter:
            completion_mask(free, 10, np.array(rest), room)
        return meter.units

    tight = [90] * 7
    assert units(free, tight, room) > 0
    assert units(np.repeat(free, 4, axis=0), tight, np.repeat(room, 4, axis=0)) > units(free, tight, room)
    assert units(free, tight + [80, 80], room) > units(free, tight, room)
    assert units(free, [1, 1], room) == 0  # (the shortcut: the rest fits whatever happens)
