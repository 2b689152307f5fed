"""MR2Loss with timm models (pretrained=False: no weights here): the documented recipe through
forward_features / forward_head(pre_logits=True), and ClassifierWithFeatures on a timm model."""

from __future__ import annotations

import pytest
import torch

from mr2 import ClassifierWithFeatures, MR2Loss

timm = pytest.importorskip("timm", reason="the vision extra is not installed")

NUM_CLASSES = 4


def logits_and_features(model: torch.nn.Module, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The recipe of docs/integrations.md: the pre-logits features and the classifier applied to them."""
    features = model.forward_head(model.forward_features(images), pre_logits=True)
    return model.get_classifier()(features), features


@pytest.mark.parametrize("name", ["test_resnet", "test_vit", "test_efficientnet"])
def test_recipe_and_wrapper_give_the_model_logits_and_the_head_input(name):
    model = timm.create_model(name, pretrained=False, num_classes=NUM_CLASSES).eval()
    images = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        logits, features = logits_and_features(model, images)
        wrapped_logits, wrapped_features = ClassifierWithFeatures(model)(images)
        expected = model(images)
    assert logits.shape == (3, NUM_CLASSES) and features.shape == (3, model.num_features)
    torch.testing.assert_close(logits, expected, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(wrapped_logits, expected, rtol=0, atol=0)
    torch.testing.assert_close(wrapped_features, features, rtol=1e-6, atol=1e-6)


def test_training_steps_through_the_recipe_and_the_wrapper_agree():
    images = torch.randn(8, 1, 28, 28)
    target = torch.arange(8) % NUM_CLASSES
    runs = []
    for use_wrapper in (False, True):
        torch.manual_seed(0)
        model = timm.create_model("test_efficientnet", pretrained=False, num_classes=NUM_CLASSES, in_chans=1)
        criterion = MR2Loss(NUM_CLASSES, feature_dim=model.num_features, lambda_rep=0.5)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        forward = ClassifierWithFeatures(model) if use_wrapper else (lambda x, m=model: logits_and_features(m, x))
        losses = []
        for _ in range(3):
            logits, features = forward(images)
            loss = criterion(logits, features, target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        runs.append((losses, criterion.statistics.state_dict()))
    assert runs[0][0] == pytest.approx(runs[1][0], rel=1e-5)
    for name, value in runs[0][1].items():
        torch.testing.assert_close(runs[1][1][name], value, rtol=1e-4, atol=1e-5, msg=name)
    assert runs[0][1]["samples_seen"].tolist() == [6] * NUM_CLASSES


def test_resume_from_timm_checkpoint_saver_restores_the_statistics(tmp_path):
    # The recipe of docs/integrations.md: the loss attached to the timm model, so timm's own
    # CheckpointSaver / resume_checkpoint save and restore its statistics with the weights.
    from timm.models import resume_checkpoint
    from timm.utils import CheckpointSaver

    generator = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 1, 28, 28, generator=generator), torch.arange(8) % NUM_CLASSES)
               for _ in range(4)]

    def build() -> tuple[torch.nn.Module, MR2Loss, torch.optim.Optimizer]:
        torch.manual_seed(0)
        model = timm.create_model("test_efficientnet", pretrained=False, num_classes=NUM_CLASSES, in_chans=1)
        criterion = MR2Loss(NUM_CLASSES, feature_dim=model.num_features)
        model.add_module("mr2_loss", criterion)
        return model, criterion, torch.optim.SGD(model.parameters(), lr=0.1)

    def train(model, criterion, optimizer, steps) -> None:
        for images, target in steps:
            loss = criterion(*logits_and_features(model, images), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    uninterrupted = build()
    train(*uninterrupted, batches)

    stopped = build()
    train(*stopped, batches[:2])
    saver = CheckpointSaver(stopped[0], stopped[2], checkpoint_dir=str(tmp_path), recovery_dir=str(tmp_path))
    saver.save_checkpoint(epoch=0)

    resumed = build()  # fresh statistics: they must come from the checkpoint
    resume_checkpoint(resumed[0], str(tmp_path / "last.pth.tar"), resumed[2], log_info=False)
    assert resumed[1].statistics.samples_seen.sum() == 16
    train(*resumed, batches[2:])
    for name, value in uninterrupted[1].statistics.state_dict().items():
        assert torch.equal(resumed[1].statistics.state_dict()[name], value), name
