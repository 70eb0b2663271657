"""Known answers to every exercise set's exercises, as source code: one module per set, named
after the set (tests/mutants/02_masks.py for solutions/02_masks/), read by exercise_harness.

Each module holds, keyed by exercise name and then by a short name of the answer:
    MUTANTS     wrong answers, at least two per exercise. Each must fail the hidden tests on its
                own, and each that computes wrong numbers must fail the visible check too
                (answers named "calls ..." compute the right numbers with a ready-made
                implementation: only the hidden tests, which refuse them credit, catch them).
    HINTS       for at least five MUTANTS per exercise, words the visible check's message must
                contain: each likely wrong answer is told its own bug.
and, where a set needs them:
    ACCEPTED    right answers written another way: they keep full credit.
    READY_MADE  ready-made code under a name no reading of the source catches: the hidden tests
                refuse it, saying so.
    IN_PLACE    answers that change their input in place, beyond the MUTANTS named "... in
                place": the visible check names the change, and the hidden tests count it wrong.
tests/test_exercises.py runs every one of them, in every set, through the same tests.
"""
