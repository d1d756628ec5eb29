"""The namespaces a PyTorch script touches first (``torch.device``, ``torch.cuda``, ``torch.backends``,
``torch.accelerator``, autocast and ``GradScaler``, the module paths it imports), run as PyTorch runs
them (torch, installed as an oracle, beside torchlean where both can run here)."""

from __future__ import annotations

import copy
import pickle
import warnings

import numpy as np
import pytest
import torch

import torchlean as tl
from torchlean.errors import ArgumentError, DeviceError, NotPicklableError, TorchLeanError
from torchlean.runtime.device import canonical_device

HAS_CUDA = tl.cuda.is_available()


# -- torch.device --------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [("cpu",), ("cuda",), ("cuda:0",), ("cuda:3",), ("cuda", 1), ("cpu", 0)])
def test_device_matches_torch(args):
    ours, theirs = tl.device(*args), torch.device(*args)
    assert str(ours) == str(theirs)
    assert repr(ours) == repr(theirs)
    assert ours.type == theirs.type and ours.index == theirs.index
    assert tl.device(ours) is ours  # device(device) is the same object
    assert pickle.loads(pickle.dumps(ours)) == ours


def test_device_equality_and_hash():
    assert tl.device("cuda") != tl.device("cuda:0")  # as PyTorch: no index is not index 0
    assert tl.device("cuda", 0) == tl.device("cuda:0")
    assert tl.device("cpu") == "cpu" and "cuda:1" == tl.device("cuda", 1)  # (PyTorch says False: documented)
    assert {tl.device("cpu"): 1}["cpu"] == 1
    assert tl.device(2) == "cuda:2"


@pytest.mark.parametrize("bad", ["foo", "cuda:-1", "cuda:x", "", "cuda:0:1"])
def test_device_rejects_what_torch_rejects(bad):
    with pytest.raises(DeviceError, match="device"):
        tl.device(bad)
    with pytest.raises(RuntimeError):
        torch.device(bad)


@pytest.mark.parametrize("other", ["mps", "meta", "cpu:1"])
def test_device_names_torchlean_does_not_have(other):
    torch.device(other)  # valid in PyTorch; torchlean has one CPU and CUDA devices only
    with pytest.raises(DeviceError, match="device: torchlean has"):
        tl.device(other)


def test_device_with_an_index_twice_and_bad_types():
    with pytest.raises(DeviceError, match="must not include an index"):
        tl.device("cuda:0", 1)
    with pytest.raises(DeviceError, match="index"):
        tl.device("cuda", -1)
    with pytest.raises(DeviceError, match="expected a device string"):
        tl.device(1.5)


def test_device_objects_are_accepted_wherever_devices_are():
    assert canonical_device(tl.device("cpu")) == "cpu"
    assert canonical_device(tl.device("cuda", 2)) == "cuda:2"
    assert canonical_device(3) == "cuda:3"
    with pytest.raises(DeviceError, match="my_op"):
        canonical_device(object(), "my_op")
    x = tl.ones(2, device=tl.device("cpu"))
    y = tl.tensor([1.0], device=torch.device("cpu").type)
    assert x.device == "cpu" and y.device == "cpu"
    assert x.to(tl.device("cpu")).device == tl.device("cpu")


def test_tensor_device_has_type_and_index_like_torch():
    ours, theirs = tl.ones(2).device, torch.ones(2).device
    assert ours.type == theirs.type == "cpu"
    assert ours.index == theirs.index is None
    assert repr(ours) == repr(theirs)
    assert ours == "cpu" and isinstance(ours, tl.device)


def test_device_cuda_without_gpu_is_a_clear_error():
    if HAS_CUDA:
        pytest.skip("CUDA is available here")
    with pytest.raises(DeviceError, match="not available"):
        tl.ones(2, device=tl.device("cuda", 0))


# -- torch.cuda ---------------------------------------------------------------------------------
def test_cuda_module_without_gpu_answers_as_torch():
    if HAS_CUDA:
        pytest.skip("CUDA is available here")
    assert tl.cuda.is_available() is False and tl.cuda.device_count() == 0
    assert tl.cuda.is_available() == torch.cuda.is_available()
    # memory figures: 0 bytes without CUDA, as PyTorch reports
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved"):
        assert getattr(tl.cuda, name)() == getattr(torch.cuda, name)() == 0
    tl.cuda.empty_cache()
    tl.cuda.reset_peak_memory_stats()
    assert tl.cuda.is_bf16_supported() is False


@pytest.mark.parametrize("call", ["current_device", "synchronize", "get_device_name", "get_device_properties",
                                  "set_device"])
def test_cuda_calls_that_need_a_gpu_raise_naming_the_call(call):
    if HAS_CUDA:
        pytest.skip("CUDA is available here")
    fn = getattr(tl.cuda, call)
    with pytest.raises(DeviceError, match=f"torchlean.cuda.{call}: CUDA is not available"):
        fn(0) if call == "set_device" else fn()


def test_cuda_manual_seed_seeds_the_one_default_generator():
    tl.manual_seed(123)
    a = tl.rand(5).numpy()
    tl.manual_seed(7)
    tl.cuda.manual_seed(123)
    b = tl.rand(5).numpy()
    tl.cuda.manual_seed_all(123)
    c = tl.rand(5).numpy()
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)


@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
def test_cuda_module_with_gpu():
    assert tl.cuda.device_count() >= 1
    assert tl.cuda.current_device() == 0
    assert isinstance(tl.cuda.get_device_name(), str) and tl.cuda.get_device_name(0)
    tl.cuda.synchronize()
    before = tl.cuda.memory_allocated()
    x = tl.ones(1024, device="cuda")
    assert tl.cuda.memory_allocated() >= before + 4096
    assert tl.cuda.max_memory_allocated() >= tl.cuda.memory_allocated()
    assert tl.cuda.memory_reserved() >= tl.cuda.memory_allocated()
    del x
    tl.cuda.reset_peak_memory_stats()
    assert tl.cuda.max_memory_allocated() == tl.cuda.memory_allocated()
    tl.cuda.empty_cache()
    tl.cuda.set_device(0)
    assert tl.ones(1, device="cuda").device == "cuda:0"
    with pytest.raises(DeviceError, match="set_device"):
        tl.cuda.set_device(tl.cuda.device_count())


def test_accelerator_matches_torch():
    assert tl.accelerator.is_available() == HAS_CUDA
    assert tl.accelerator.device_count() == tl.cuda.device_count()
    if not HAS_CUDA:
        assert tl.accelerator.current_accelerator() is None is torch.accelerator.current_accelerator()
        with pytest.raises(DeviceError, match="current_device_index"):
            tl.accelerator.current_device_index()
    else:
        assert tl.accelerator.current_accelerator() == tl.device("cuda")


# -- torch.backends and the global switches --------------------------------------------------------
@pytest.fixture
def restore_switches():
    saved = (tl.backends.cuda.matmul.allow_tf32, tl.are_deterministic_algorithms_enabled(), tl.get_num_threads())
    yield
    tl.backends.cuda.matmul.allow_tf32 = saved[0]
    tl.use_deterministic_algorithms(saved[1])
    tl.set_num_threads(saved[2])


def test_backends_tf32_switches_map_to_torchleans(restore_switches):
    from torchlean.runtime import allow_tf32

    assert tl.backends.cuda.matmul.allow_tf32 is False is torch.backends.cuda.matmul.allow_tf32  # both default off
    tl.backends.cuda.matmul.allow_tf32 = True
    assert allow_tf32() and tl.backends.cudnn.allow_tf32 and tl.get_float32_matmul_precision() == "high"
    tl.backends.cudnn.allow_tf32 = False
    assert not allow_tf32() and tl.get_float32_matmul_precision() == "highest"
    with pytest.raises(ArgumentError):
        tl.backends.cuda.matmul.allow_tf32 = "yes"
    with pytest.raises(ArgumentError, match="unknown setting"):
        tl.backends.cuda.matmul.allow_tf64 = True


def test_float32_matmul_precision(restore_switches):
    from torchlean.runtime import allow_tf32

    assert tl.get_float32_matmul_precision() == torch.get_float32_matmul_precision() == "highest"
    for p, tf32 in (("high", True), ("medium", True), ("highest", False)):
        tl.set_float32_matmul_precision(p)
        assert allow_tf32() is tf32 and tl.get_float32_matmul_precision() == p
    with pytest.raises(ArgumentError, match="set_float32_matmul_precision"):
        tl.set_float32_matmul_precision("low")


def test_deterministic_switches(restore_switches):
    assert tl.are_deterministic_algorithms_enabled() == torch.are_deterministic_algorithms_enabled() is False
    assert tl.backends.cudnn.deterministic is False is torch.backends.cudnn.deterministic
    tl.backends.cudnn.deterministic = True
    assert tl.deterministic_reductions() and tl.are_deterministic_algorithms_enabled()
    tl.use_deterministic_algorithms(False)
    assert not tl.backends.cudnn.deterministic
    tl.use_deterministic_algorithms(True, warn_only=True)
    assert tl.deterministic_reductions() and tl.is_deterministic_algorithms_warn_only_enabled()
    with pytest.raises(ArgumentError, match="use_deterministic_algorithms"):
        tl.use_deterministic_algorithms("on")


def test_cudnn_benchmark_and_enabled_are_accepted():
    assert tl.backends.cudnn.benchmark is False and tl.backends.cudnn.enabled is True
    tl.backends.cudnn.benchmark = True
    assert tl.backends.cudnn.benchmark is True
    tl.backends.cudnn.benchmark = False
    assert tl.backends.cudnn.is_available() is False  # torchlean does not use cuDNN
    assert tl.backends.mps.is_available() is False is torch.backends.mps.is_available()


def test_num_threads(restore_switches):
    n = tl.get_num_threads()
    assert n >= 1
    assert tl.set_num_threads(1) == 1 and tl.get_num_threads() == 1
    with pytest.warns(RuntimeWarning, match="thread pool"):
        tl.set_num_threads(10_000)
    assert tl.get_num_threads() == n or tl.get_num_threads() >= 1
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ArgumentError, match="set_num_threads"):
            tl.set_num_threads(bad)


# -- autocast --------------------------------------------------------------------------------------
def test_autocast_runs_float32():
    tl.manual_seed(0)
    a, b = tl.randn(4, 5), tl.randn(5, 3)
    ref = (a @ b).numpy()
    for ctx in (tl.autocast("cpu"), tl.autocast(device_type="cuda", dtype=tl.float16), tl.amp.autocast("cpu"),
                tl.cuda.amp.autocast(), tl.autocast("cpu", dtype=tl.bfloat16, enabled=False)):
        with ctx:
            out = a @ b
            assert out.dtype == tl.float32
            np.testing.assert_array_equal(out.numpy(), ref)
    assert not tl.is_autocast_enabled()

    @tl.autocast("cuda")
    def f(x):
        return tl.is_autocast_enabled("cuda"), x * 2

    on, y = f(a)
    assert on and not tl.is_autocast_enabled("cuda")


@pytest.mark.parametrize("kwargs,err", [({"device_type": "cuda:0"}, ArgumentError), ({"device_type": "tpu"}, ArgumentError),
                                        ({"device_type": "cpu", "dtype": tl.int64}, TorchLeanError),
                                        ({"device_type": 0}, ArgumentError)])
def test_autocast_checks_its_arguments(kwargs, err):
    with pytest.raises(err, match="autocast"):
        tl.autocast(**kwargs)


# -- GradScaler --------------------------------------------------------------------------------------
def _pair(seed=0):
    rng = np.random.default_rng(seed)
    w, x = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    ours = tl.nn.Linear(4, 3, bias=False)
    theirs = torch.nn.Linear(4, 3, bias=False)
    with tl.no_grad():
        ours.weight.copy_(tl.tensor(w))
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(w))
    return ours, theirs, x


def test_grad_scaler_follows_torchs_algorithm():
    ours, theirs, x = _pair()
    kw = dict(init_scale=8.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2)
    so, st = tl.amp.GradScaler("cpu", **kw), torch.amp.GradScaler("cpu", **kw)
    oo, ot = tl.optim.SGD(ours.parameters(), lr=0.1), torch.optim.SGD(theirs.parameters(), lr=0.1)
    for step in range(7):
        bad = step in (2, 5)  # an inf in the loss: the step is skipped and the scale backs off
        xo, xt = tl.tensor(x), torch.tensor(x)
        lo = (ours(xo) ** 2).mean() * (float("inf") if bad else 1.0)
        lt = (theirs(xt) ** 2).mean() * (float("inf") if bad else 1.0)
        oo.zero_grad()
        ot.zero_grad()
        so.scale(lo).backward()
        st.scale(lt).backward()
        if step == 3:
            so.unscale_(oo)
            st.unscale_(ot)
            np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-5, atol=1e-6)
        so.step(oo)
        st.step(ot)
        so.update()
        st.update()
        assert so.get_scale() == st.get_scale(), step
        assert so.state_dict() == {k: (v if k != "scale" else float(v)) for k, v in st.state_dict().items()}
        np.testing.assert_allclose(ours.weight.detach().numpy(), theirs.weight.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_grad_scaler_equals_training_without_it():
    a, _, x = _pair(1)
    b = copy.deepcopy(a)
    oa, ob = tl.optim.Adam(a.parameters(), lr=0.01), tl.optim.Adam(b.parameters(), lr=0.01)
    scaler = tl.amp.GradScaler("cpu")
    for _ in range(3):
        oa.zero_grad()
        ob.zero_grad()
        scaler.scale((a(tl.tensor(x)) ** 2).sum()).backward()
        scaler.step(oa)
        scaler.update()
        (b(tl.tensor(x)) ** 2).sum().backward()
        ob.step()
    np.testing.assert_array_equal(a.weight.detach().numpy(), b.weight.detach().numpy())  # powers of two are exact


def test_grad_scaler_state_dict_round_trip_and_misuse():
    s = tl.amp.GradScaler("cpu", init_scale=4.0)
    s2 = tl.amp.GradScaler("cpu")
    s2.load_state_dict(s.state_dict())
    assert s2.get_scale() == 4.0 and s2.state_dict() == s.state_dict()
    model = tl.nn.Linear(2, 1)
    opt = tl.optim.SGD(model.parameters(), lr=0.1)
    s.scale(model(tl.ones(1, 2)).sum()).backward()
    s.unscale_(opt)
    with pytest.raises(TorchLeanError, match="already been called"):
        s.unscale_(opt)
    s.step(opt)
    with pytest.raises(TorchLeanError, match="step\\(\\) has already been called"):
        s.step(opt)
    s.update()
    with pytest.raises(TorchLeanError, match="no inf checks"):
        s.update()
    with pytest.raises(ArgumentError, match="init_scale"):
        tl.amp.GradScaler("cpu", init_scale=-1.0)
    with pytest.raises(ArgumentError, match="empty"):
        s.load_state_dict({})


def test_grad_scaler_disabled_is_a_pass_through_like_torch():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pairs = [(tl.amp.GradScaler("cpu", enabled=False), torch.amp.GradScaler("cpu", enabled=False))]
        if not HAS_CUDA:  # GradScaler("cuda") without CUDA disables itself (with a warning), as PyTorch's
            pairs.append((tl.amp.GradScaler(), torch.amp.GradScaler()))
            pairs.append((tl.cuda.amp.GradScaler(), torch.amp.GradScaler("cuda")))
    for ours, theirs in pairs:
        assert ours.is_enabled() == theirs.is_enabled() is False
        assert ours.get_scale() == theirs.get_scale() == 1.0
        assert ours.state_dict() == theirs.state_dict() == {}
        loss = tl.ones(1)
        assert ours.scale(loss) is loss
        model = tl.nn.Linear(2, 1)
        opt = tl.optim.SGD(model.parameters(), lr=0.5)
        w0 = model.weight.detach().numpy().copy()
        ours.scale(model(tl.ones(1, 2)).sum()).backward()
        ours.step(opt)
        ours.update()
        assert not np.array_equal(model.weight.detach().numpy(), w0)
    if not HAS_CUDA:
        with pytest.warns(UserWarning, match="CUDA is not available"):
            tl.amp.GradScaler("cuda")


# -- module paths ----------------------------------------------------------------------------------
@pytest.mark.parametrize("path,name", [("activation", "ReLU"), ("linear", "Linear"), ("conv", "Conv2d"),
                                       ("module", "Module"), ("loss", "MSELoss"), ("normalization", "LayerNorm"),
                                       ("dropout", "Dropout"), ("container", "Sequential"),
                                       ("batchnorm", "BatchNorm2d"), ("pooling", "MaxPool2d"), ("sparse", "Embedding")])
def test_nn_module_paths(path, name):
    import importlib

    mod = importlib.import_module(f"torchlean.nn.modules.{path}")
    assert getattr(mod, name) is getattr(tl.nn, name)
    assert getattr(getattr(tl.nn.modules, path), name) is getattr(tl.nn, name)
    assert hasattr(importlib.import_module(f"torch.nn.modules.{path}"), name)


def test_nn_module_path_of_a_missing_class_is_a_clear_error():
    mod = tl.nn.modules.rnn
    for name in mod.__all__:
        if not hasattr(tl.nn, name):
            with pytest.raises(TorchLeanError, match=f"does not implement nn.{name}"):
                getattr(mod, name)
    with pytest.raises(AttributeError):
        mod.Linear  # not one of torch.nn.modules.rnn's names


def test_optim_lr_scheduler_and_init_paths():
    from torchlean.nn.init import kaiming_uniform_  # noqa: F401
    from torchlean.optim.lr_scheduler import StepLR  # noqa: F401

    assert tl.optim.lr_scheduler.StepLR is StepLR


def test_data_parallel_is_a_one_device_pass_through():
    tl.manual_seed(0)
    inner = tl.nn.Linear(3, 2)
    dp = tl.nn.parallel.DataParallel(inner)
    assert dp.module is inner
    assert list(dp.state_dict()) == ["module.weight", "module.bias"]  # PyTorch's keys
    assert list(torch.nn.DataParallel(torch.nn.Linear(3, 2)).state_dict()) == ["module.weight", "module.bias"]
    x = tl.randn(4, 3)
    np.testing.assert_array_equal(dp(x).detach().numpy(), inner(x).detach().numpy())
    if not HAS_CUDA:
        with pytest.raises(DeviceError, match="DataParallel"):
            tl.nn.parallel.DataParallel(inner, device_ids=[0])


def test_distributed_data_parallel_is_a_clear_error():
    with pytest.raises(TorchLeanError, match="DistributedDataParallel: the default process group has not been initialized"):
        tl.nn.parallel.DistributedDataParallel(tl.nn.Linear(2, 2))


# -- pickling and deepcopy -------------------------------------------------------------------------
def test_tensors_refuse_pickle_pointing_to_save():
    for t in (tl.ones(2), tl.tensor([1, 2]), tl.nn.Parameter(tl.ones(2)), tl.nn.Linear(2, 2)):
        with pytest.raises(NotPicklableError, match="torchlean.save"):
            pickle.dumps(t)
    with pytest.raises(TypeError):  # (a TypeError, as Python's own unpicklable objects raise)
        pickle.dumps(tl.ones(1))


def test_deepcopy_copies_leaves_like_torch():
    t = tl.ones(3, requires_grad=True)
    (t * 2).sum().backward()
    c = copy.deepcopy(t)
    assert c is not t and c.requires_grad and c.is_leaf
    np.testing.assert_array_equal(c.grad.numpy(), t.grad.numpy())
    model = tl.nn.Linear(2, 2)
    clone = copy.deepcopy(model)
    assert isinstance(clone.weight, tl.nn.Parameter) and clone.weight is not model.weight
    with tl.no_grad():
        clone.weight.add_(1.0)
    assert not np.array_equal(clone.weight.detach().numpy(), model.weight.detach().numpy())
    with pytest.raises(TorchLeanError, match="deepcopy: only leaf tensors"):
        copy.deepcopy(t * 2)
