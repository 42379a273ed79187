# gammaboard's minimal materializer (its README, "Process API"), completed only where the
# docs elide the arrays: the sampler's points, as they come in the latent batch's payload.
from gammaboard_process import MaterializedBatch, Materializer, run_materializer


class MyMaterializer(Materializer):  # ABC inheritance is optional.
    def materialize_batch(self, latent_batch):
        payload = latent_batch["payload"]
        xs_discrete, xs_continuous, weights = (
            payload["xs_discrete"], payload["xs_continuous"], payload["weights"])
        return MaterializedBatch(xs_discrete, xs_continuous, weights)

run_materializer(MyMaterializer)
