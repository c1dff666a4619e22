"""The `jax` training stack: the recipe's model as a Flax (linen) module, trained with
optax under `jax.jit`.

It starts from the seed's PyTorch initial weights, carried over by the model's twin
(`bakeoff.stacks.twins`), and runs the update PyTorch's optimizer runs (optax's Adam
with PyTorch's epsilon, state in FP32). One jitted function takes the loss, its
gradients and the update; the first call compiles it, and the training side reports
that apart as the first step's extra time. XLA's CPU threads are set before jax is
first imported in the worker.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bakeoff.stacks import schedule, twins


class JaxTrainer:
    checkpoint_format = "Flax's msgpack serialization of the parameters and the optax state"

    def __init__(self, spec: Any) -> None:
        twin = twins.twin(spec.factory)
        if twin is None:
            raise RuntimeError(twins.missing(spec.factory, spec.stack))
        applied = twins.xla_threads(spec.threads)
        import jax
        import jax.numpy as jnp
        import optax

        self.jax = jax
        self.x_train, self.y_train, self.x_val, self.y_val = twins.load_data(
            spec.data_path, twin, np.int32
        )
        self.rows = len(self.y_train)
        module = twin.flax_module()
        self.params = jax.tree.map(jnp.asarray, twin.flax_params(twins.load_state(spec.init_path)))
        # The learning rate is a hyperparameter in the optimizer's state, set from the
        # schedule before every update (a new value, not a new compile); the state's
        # update count says where the schedule is after a load.
        optimizers = {
            "adam": lambda: optax.inject_hyperparams(optax.adam)(spec.lr, eps=1e-8),
            "adamw": lambda: optax.inject_hyperparams(optax.adamw)(
                spec.lr, eps=1e-8, weight_decay=0.01
            ),
            "sgd": lambda: optax.inject_hyperparams(optax.sgd)(spec.lr),
        }
        tx = optimizers[spec.optimizer]()
        self.opt_state = tx.init(self.params)
        self.schedule = schedule.of(spec)
        self.updates = 0
        # The rate in the very type the state holds it in: another dtype (or a weak
        # type) would make jit compile the step again.
        self._lr_dtype = self.opt_state.hyperparams["learning_rate"].dtype
        self.jnp = jnp

        def logits(params: Any, x: Any) -> Any:
            return module.apply({"params": params}, x)

        def loss(params: Any, x: Any, y: Any) -> Any:
            return optax.softmax_cross_entropy_with_integer_labels(logits(params, x), y).mean()

        def train_step(params: Any, opt_state: Any, x: Any, y: Any) -> Any:
            value, grads = jax.value_and_grad(loss)(params, x, y)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, value

        self._step = jax.jit(train_step)
        self._logits = jax.jit(logits)
        self.settings: dict[str, Any] = {
            **applied,
            "jax_version": jax.__version__,
            "model": "flax.linen",
            "optimizer": f"optax.{spec.optimizer}",
            "optimizer_state": "float32",
            "lr": spec.lr,
            "lr_schedule": self.schedule.words(),
            "global_batch": spec.batch_size,
            "precision": "fp32",
            "compile_backend": "XLA (jax.jit)",
            "trainable_parameters": int(sum(p.size for p in jax.tree.leaves(self.params))),
        }

    def prepare(self, indices: Any) -> tuple[np.ndarray, np.ndarray]:
        idx = np.asarray(indices, dtype=np.int64)
        return self.x_train[idx], self.y_train[idx]

    def step(self, prepared: tuple[np.ndarray, np.ndarray]) -> float:
        x, y = prepared
        lr = self.schedule.at(self.updates)
        self.opt_state.hyperparams["learning_rate"] = self.jnp.asarray(lr, self._lr_dtype)
        self.updates += 1
        # float() waits for the result: the step's time is its computation.
        self.params, self.opt_state, value = self._step(self.params, self.opt_state, x, y)
        return float(value)

    def initial_loss(self, prepared: tuple[np.ndarray, np.ndarray]) -> float:
        x, y = prepared
        return twins.cross_entropy(np.asarray(self._logits(self.params, x)), y)

    def evaluate(self) -> float:
        logits = np.asarray(self._logits(self.params, self.x_val))
        return float((logits.argmax(1) == self.y_val).mean())

    def save(self, path: str) -> None:
        from flax import serialization

        state = {"params": self.params, "opt_state": self.opt_state}
        with open(path, "wb") as f:
            f.write(serialization.to_bytes(state))

    def load(self, path: str) -> None:
        from flax import serialization

        target = {"params": self.params, "opt_state": self.opt_state}
        with open(path, "rb") as f:
            state = serialization.from_bytes(target, f.read())
        self.params, self.opt_state = state["params"], state["opt_state"]
        self.updates = int(self.opt_state.count)
