"""Train a tiny Lightning model on the CPU, saving with ModelCheckpoint: ``python -m tests.support.lightning_writer DIR
STEPS EVERY [WIDTH]``.  Each save is ``DIR/epoch=E-step=S.ckpt``; ``last.ckpt`` is written too.  WIDTH makes the
model (and so each save) larger, for a process killed while it saves."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch.utils.data import DataLoader, TensorDataset

    out, steps, every = argv[0], int(argv[1]), int(argv[2])
    width = int(argv[3]) if len(argv) > 3 else 8

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(width, width)

        def training_step(self, batch: list[torch.Tensor], index: int) -> torch.Tensor:
            (x,) = batch
            return self.layer(x).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    data = DataLoader(TensorDataset(torch.randn(4 * steps, width)), batch_size=4)
    checkpoints = ModelCheckpoint(dirpath=out, every_n_train_steps=every, save_top_k=-1, save_last=True)
    trainer = L.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        callbacks=[checkpoints],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Tiny(), data)


if __name__ == "__main__":
    main(sys.argv[1:])
