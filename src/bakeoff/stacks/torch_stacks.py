"""The PyTorch training stacks: eager (the reference), torch.compile, BF16 autocast
and gradient accumulation. Every one starts from the seed's initial weights (the
one file all PyTorch stacks share), uses Adam with its state in FP32, the same
data order, and the threads it is given."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np

from bakeoff import hardware
from bakeoff.stacks import model_factory, schedule

_OPTIMIZERS = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD"}


def with_lora(model: Any, spec: Any) -> Any:
    """The model with peft's LoRA adapters on the recipe's target modules; only they
    and the modules the recipe trains in full (a head) keep requires_grad. The
    adapters' B matrices start at zero, so the first loss is the base model's; their
    A matrices are drawn from the seed (set just before)."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=spec.lora_rank,
        lora_alpha=spec.lora_alpha,
        target_modules=list(spec.lora_targets),
        modules_to_save=list(spec.lora_train) or None,
        lora_dropout=0.0,
    )
    try:
        return get_peft_model(model, config)
    except ValueError as exc:  # no module matched a target
        raise RuntimeError(f"LoRA on {', '.join(spec.lora_targets)}: {exc}") from None


class TorchTrainer:
    checkpoint_format = "torch.save of the model's and the optimizer's state_dict, and the RNG's"

    def __init__(self, spec: Any) -> None:
        import torch
        from safetensors.torch import load_file

        torch.set_num_threads(spec.threads)
        with contextlib.suppress(RuntimeError):  # refused once parallel work ran
            torch.set_num_interop_threads(1)
        # Dropout and other random layers draw from the seed too, not from whatever
        # the process started with.
        torch.manual_seed(spec.seed)
        self.torch = torch
        self.stack = spec.stack
        self.spec = spec
        data = np.load(spec.data_path, allow_pickle=False)
        self.x_train = torch.from_numpy(np.ascontiguousarray(data["x_train"]))
        self.y_train = torch.from_numpy(np.ascontiguousarray(data["y_train"]))
        self.x_val = torch.from_numpy(np.ascontiguousarray(data["x_val"]))
        self.y_val = torch.from_numpy(np.ascontiguousarray(data["y_val"]))
        self.rows = len(self.y_train)
        self.model = model_factory(spec.factory, spec.factory_dir)()
        self.model.load_state_dict(load_file(spec.init_path))
        total = sum(p.numel() for p in self.model.parameters())
        self.lora = spec.stack == "lora"
        if self.lora:
            self.model = with_lora(self.model, spec)
        self.model.train()
        # Again, now that building is done (LoRA draws its adapters' A matrices):
        # every stack's first dropout masks are the same.
        torch.manual_seed(spec.seed)
        optimizer = _OPTIMIZERS[spec.optimizer]
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = getattr(torch.optim, optimizer)(trainable, lr=spec.lr)
        self.schedule = schedule.of(spec)
        self.updates = 0  # optimizer updates taken: where the schedule is
        self.forward = self.model
        self.settings: dict[str, Any] = {
            "threads": torch.get_num_threads(),
            "optimizer": optimizer,
            "optimizer_state": "float32",
            "lr": spec.lr,
            "lr_schedule": self.schedule.words(),
            "global_batch": spec.batch_size,
            "precision": "fp32",
            "trainable_parameters": sum(p.numel() for p in trainable),
            "model_parameters": total,
        }
        if self.lora:
            self.settings.update(
                method="LoRA (peft)",
                lora_targets=list(spec.lora_targets),
                lora_rank=spec.lora_rank,
                lora_alpha=spec.lora_alpha,
                trained_in_full=list(spec.lora_train),
            )
            self.checkpoint_format = (
                "torch.save of the adapters' state (peft's get_peft_model_state_dict, the "
                "head included) and the optimizer's"
            )
        elif spec.stack == "full":
            self.settings.update(method="full fine-tuning")
        if spec.stack == "torch-compile":
            self.forward = torch.compile(self.model)
            self.settings.update(compile_backend="inductor", compile_mode="default")
        elif spec.stack == "torch-bf16":
            native = bool(hardware.native_flags("bf16"))
            self.settings.update(
                precision="bf16 autocast",
                bf16=(
                    "native"
                    if native
                    else "emulated: this CPU has no native BF16 arithmetic, so it runs "
                    "through FP32 conversions"
                ),
            )
        elif spec.stack == "torch-accumulate":
            self.settings.update(micro_batch=spec.batch_size // 2, accumulation_steps=2)

    def param_groups(self) -> list[dict[str, Any]]:
        """Where the optimizer that steps keeps its learning rate."""
        return self.optimizer.param_groups

    def next_lr(self) -> float:
        """Set the schedule's rate for the next update on the optimizer; count it."""
        lr = self.schedule.at(self.updates)
        for group in self.param_groups():
            group["lr"] = lr
        self.updates += 1
        return lr

    def prepare(self, indices: Any) -> tuple[Any, Any]:
        idx = self.torch.from_numpy(np.asarray(indices, dtype=np.int64))
        return self.x_train[idx], self.y_train[idx]

    def _loss(self, x: Any, y: Any) -> Any:
        torch = self.torch
        if self.stack == "torch-bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = self.forward(x)
            return torch.nn.functional.cross_entropy(out.float(), y)
        return torch.nn.functional.cross_entropy(self.forward(x), y)

    def step(self, prepared: tuple[Any, Any]) -> float:
        x, y = prepared
        self.next_lr()
        with self.torch.enable_grad():
            self.optimizer.zero_grad(set_to_none=True)
            if self.stack == "torch-accumulate":
                half = len(x) // 2
                total = 0.0
                for part in (slice(0, half), slice(half, None)):
                    loss = self._loss(x[part], y[part]) * (len(x[part]) / len(x))
                    loss.backward()
                    total += float(loss.detach())
            else:
                loss = self._loss(x, y)
                loss.backward()
                total = float(loss.detach())
            if math.isfinite(total):
                self.optimizer.step()
        return total

    def initial_loss(self, prepared: tuple[Any, Any]) -> float:
        """The loss of the weights as they are on one batch, in eval mode (dropout off,
        norms on their running statistics) and without an update: what the gate
        compares with the reference's before any step. The eager module, under the
        stack's autocast (a compiled one would compile a second graph for eval mode)."""
        torch = self.torch
        x, y = prepared
        self.model.eval()
        try:
            with torch.no_grad():
                if self.stack == "torch-bf16":
                    with torch.autocast("cpu", dtype=torch.bfloat16):
                        out = self.model(x)
                else:
                    out = self.model(x)
                return float(torch.nn.functional.cross_entropy(out.float(), y))
        finally:
            self.model.train()

    def evaluate(self) -> float:
        """Top-1 accuracy on the validation split, in FP32 with the eager module (the
        weights are the stack's; a compiled module would recompile for eval mode)."""
        torch = self.torch
        self.model.eval()
        try:
            with torch.no_grad():
                correct = 0
                for start in range(0, len(self.x_val), 512):
                    logits = self.model(self.x_val[start : start + 512])
                    correct += int((logits.argmax(1) == self.y_val[start : start + 512]).sum())
        finally:
            self.model.train()
        return correct / len(self.x_val)

    def save(self, path: str) -> None:
        if self.lora:
            # What LoRA ships: the adapters (and the head), not the frozen base.
            from peft import get_peft_model_state_dict

            model = get_peft_model_state_dict(self.model)
        else:
            model = self.model.state_dict()
        # The RNG's state too: dropout draws from it, so a resumed run takes the very
        # masks the uninterrupted one would.
        self.torch.save(
            {
                "model": model,
                "optimizer": self.optimizer.state_dict(),
                "rng": self.torch.get_rng_state(),
                "updates": self.updates,
            },
            path,
        )

    def load(self, path: str) -> None:
        # Our own file, written by save() in this run; still read the safe way.
        state = self.torch.load(path, weights_only=True)
        if self.lora:
            from peft import set_peft_model_state_dict

            found = set_peft_model_state_dict(self.model, state["model"])
            unexpected = getattr(found, "unexpected_keys", [])
            if unexpected:
                raise RuntimeError(f"the adapters' checkpoint has {unexpected[:3]} too")
        else:
            self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.torch.set_rng_state(state["rng"])
        self.updates = int(state["updates"])
