# gammaboard's minimal batch transform (its README, "Process API"), unchanged.
from gammaboard_process import BatchTransform, TransformedBatch, run_batch_transform


class MyTransform(BatchTransform):  # ABC inheritance is optional.
    def transform_batch(self, xs_discrete, xs_continuous, weights):
        return TransformedBatch(xs_discrete, xs_continuous, weights)

run_batch_transform(MyTransform)
