# gammaboard's minimal evaluator (its README, "Process API"), unchanged but for one
# log() line the test looks for in `mainboard runs logs` (source "process").
from gammaboard_process import Evaluator, log, run_evaluator

log("gammaboard evaluator ready")


class MyEvaluator(Evaluator):  # ABC inheritance is optional.
    def eval(self, xs_discrete, xs_continuous):
        return xs_continuous[:, 0]

run_evaluator(MyEvaluator)
