"""What a worker builds a training stack from (`TrainSpec`): plain fields, so that a
job carries it as JSON (`training.messages`) and the distributed launchers
(`distributed.ranks`, `distributed.nodes`) hand it on to each rank."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrainSpec:
    """One training stack on the run's recipe, as a worker builds it."""

    stack: str
    factory: str  # "module:function" that builds the untrained model
    init_path: str  # the seed's initial weights (safetensors), shared by every stack
    data_path: str  # npz: x_train, y_train, x_val, y_val
    seed: int  # the data order
    batch_size: int  # the global batch
    lr: float
    threads: int
    candidate_id: str = ""
    optimizer: str = "adam"  # adam | adamw | sgd, its state in FP32
    factory_dir: str = ""  # put first on sys.path to import the factory's module
    processes: int = 1  # above 1: ranks under torchrun, `threads` split among them
    # A Ray cluster's address: the ranks (`processes` of them) run one a node there,
    # through Ray Train's TorchTrainer, each with its node's own cores, not here
    # under torchrun (`bakeoff.distributed.nodes`); Ray Train's files go under
    # `cluster_tmp`.
    cluster_address: str = ""
    cluster_tmp: str = ""
    # The lora stack's adapters (peft): the modules that get them, their rank and
    # alpha, and the modules trained in full beside them (a head).
    lora_targets: tuple[str, ...] = ()
    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_train: tuple[str, ...] = ()
    # The learning-rate schedule (`bakeoff.stacks.schedule`): its kind, warm-up
    # updates, and the recipe's steps it runs over.
    schedule: str = "constant"
    warmup_steps: int = 0
    total_steps: int = 0
