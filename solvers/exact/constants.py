"""The numbers that more than one module of the exact solvers reads.

Why a module of their own: CP-SAT's cost unit is used by the CP-SAT backend (cpsat.py) and reported by the solver
(solver.py); the size from which a model counts as large is read by the CP-SAT backend (no presolve), the HiGHS
backend (milp.py: a margin on its time limit) and the solver (neighbourhood search instead of whole solves). Every
reader reads them as ``constants.NAME`` when it runs, never copies them with ``from ... import``, so that a change
made here at run time (a test lowers LARGE_MODEL so that a small instance counts as large) reaches all of them.
"""

COST_SCALE = 10_000  # CP-SAT cost unit: 1e-4 ms
LARGE_MODEL = 20_000  # above this many (item, device) variables: CP-SAT without presolve, HiGHS' 10 % time margin, neighbourhoods
