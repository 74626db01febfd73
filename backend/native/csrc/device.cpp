// The native fast path of the simulated `neuron` device (PrivateUse1).
//
// Python (backend/kernels.py) owns every decision: for an (op, input dtypes) pair it says
// whether the op is a plain native lowering (no fallback to record, no fault, no device RNG) and
// which arguments get the bf16 auto-cast. The decision is cached here per op and dtypes, and
// Python invalidates the cache when the lowering table, the precision mode or the planted faults
// change. A plain op then runs without Python: device arguments become CPU views of their
// payloads, the CPU kernel computes, fresh results are adopted as device tensors. Anything else
// (a fallback, a fault, a missing payload, an unusual result) goes to the Python kernel,
// unchanged. The payload table and the memory accounting stay the Python ones
// (backend/storage.py, backend/memory.py): the native code calls them.
#include "common.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ops/as_strided_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/set_ops.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/SmallVector.h>
#include <c10/util/strides.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/PyInterpreter.h>
#include <torch/csrc/Storage.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/library.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

namespace neuron_native {

namespace {

constexpr auto kDevice = c10::DeviceType::PrivateUse1;
const c10::DispatchKeySet kMeta(c10::DispatchKey::Meta);

enum Kind : int8_t { kSlow = 0, kFast = 1, kFastRounded = 2 };

// Python objects the native path calls (owned references, set once by install()).
struct PyHooks {
  PyObject* entries = nullptr;        // backend.storage._entries: device storage key -> entry list
  PyObject* adopt = nullptr;          // backend.storage._adopt(dev_storage, payload, nbytes)
  PyObject* track = nullptr;          // backend.storage._track_accounted(dev_storage, payload, nbytes)
  PyObject* allocate = nullptr;       // backend.memory.allocate(nbytes)
  PyObject* free = nullptr;           // backend.memory.free(nbytes)
  PyObject* run = nullptr;            // backend.kernels._run(op, *args, **kwargs)
  PyObject* decide = nullptr;         // backend.kernels._native_decision(op, dtypes) -> (kind, rounded)
  PyObject* sync_written = nullptr;   // backend.kernels._sync_written(dev, cpu)
  PyObject* check_result = nullptr;   // backend.kernels._check_result(cpu_result)
  std::unordered_map<std::string, PyObject*> explicit_py;  // schema name -> Python kernel
};
PyHooks hooks;
bool installed = false;
std::atomic<uint64_t> generation{1};

struct Decision {
  uint64_t generation;
  c10::SmallVector<int8_t, 6> dtypes;
  int8_t kind;
  std::vector<int> rounded;
};

// What the fast path needs to know about an op overload, computed once from its schema
// (the same facts as backend.kernels.OpInfo).
struct OpFacts {
  std::string name;
  size_t nargs = 0, nrets = 0;
  std::vector<int> written;      // positions of written (out= / in-place) arguments
  std::vector<int> returns_arg;  // per return: the written argument it is, or -1
  bool returns_written = false;
  bool view = false;             // some return aliases an input without writing it
  std::atomic<int64_t> executed{0};
  std::mutex mu;
  std::vector<Decision> decisions;
};

std::shared_mutex facts_mu;
std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpFacts>> facts_table;

OpFacts& facts_of(const c10::OperatorHandle& op) {
  const c10::FunctionSchema* key = &op.schema();
  {
    std::shared_lock lock(facts_mu);
    auto it = facts_table.find(key);
    if (it != facts_table.end()) return *it->second;
  }
  auto f = std::make_unique<OpFacts>();
  const auto& schema = op.schema();
  f->name = overload_name(op);
  f->nargs = schema.arguments().size();
  f->nrets = schema.returns().size();
  std::unordered_map<c10::Symbol, int> sets;
  for (size_t i = 0; i < schema.arguments().size(); i++) {
    const auto* ai = schema.arguments()[i].alias_info();
    if (ai != nullptr && ai->isWrite()) {
      f->written.push_back(static_cast<int>(i));
      for (const auto& s : ai->beforeSets()) sets[s] = static_cast<int>(i);
    }
  }
  for (const auto& r : schema.returns()) {
    const auto* ai = r.alias_info();
    int pos = -1;
    if (ai != nullptr && ai->isWrite()) {
      for (const auto& s : ai->beforeSets()) {
        auto it = sets.find(s);
        if (it != sets.end()) {
          pos = it->second;
          break;
        }
      }
    } else if (ai != nullptr) {
      f->view = true;
    }
    f->returns_arg.push_back(pos);
    if (pos >= 0) f->returns_written = true;
  }
  std::unique_lock lock(facts_mu);
  auto [it, _] = facts_table.emplace(key, std::move(f));
  return *it->second;
}

// ------------------------------------------------------------------ tensors and payloads

bool on_device(const at::Tensor& t) { return t.defined() && t.device().type() == kDevice; }

PyObject* storage_key(const at::Tensor& t) {
  return PyLong_FromVoidPtr(t.storage().unsafeGetStorageImpl());
}

// The CPU payload of a device tensor (GIL held); false when it has none.
bool payload_of(const at::Tensor& t, c10::Storage* out) {
  PyObject* key = storage_key(t);
  PyObject* entry = PyDict_GetItemWithError(hooks.entries, key);
  Py_DECREF(key);
  if (entry == nullptr || !PyList_Check(entry) || PyList_GET_SIZE(entry) < 1) {
    PyErr_Clear();
    return false;
  }
  PyObject* payload = PyList_GET_ITEM(entry, 0);
  if (!THPStorage_Check(payload)) return false;
  *out = THPStorage_Unpack(payload);
  return true;
}

// The payload seen through the device tensor's layout (writes go to the device).
at::Tensor cpu_view(const at::Tensor& dev, const c10::Storage& payload) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(payload),
                                                  c10::DispatchKeySet(c10::DispatchKey::CPU), dev.dtype());
  impl->set_sizes_and_strides(dev.sizes(), dev.strides(), dev.storage_offset());
  return at::Tensor(std::move(impl));
}

// A data-less device tensor, as torch._C._acc.create_empty_tensor((0,), dtype) makes it.
at::Tensor empty_device_tensor(caffe2::TypeMeta dtype) {
  c10::Storage storage{c10::Storage::use_byte_size_t{}, 0, c10::GetAllocator(c10::kMeta), true};
  storage.set_data_ptr_noswap(at::DataPtr{nullptr, c10::Device(kDevice, 0)});
  auto t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage),
                                                    c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtype);
  t.unsafeGetTensorImpl()->set_sizes_contiguous({0});
  return t;
}

// Metadata through the Meta kernel of set_, as backend.storage does (no bounds check, no bytes).
void set_layout(at::Tensor& t, const c10::Storage& st, c10::IntArrayRef size, c10::IntArrayRef stride,
                int64_t offset) {
  at::_ops::set__source_Storage_storage_offset::redispatch(kMeta, t, st, offset, c10::fromIntArrayRefSlow(size),
                                                           c10::fromIntArrayRefSlow(stride));
}

PyObject* wrap_storage(const c10::Storage& s) {
  PyObject* obj = THPStorage_Wrap(s);
  if (obj == nullptr) throw python_error();
  return obj;
}

void call_py(PyObject* fn, std::initializer_list<PyObject*> args_steal) {
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(args_steal.size()));
  Py_ssize_t i = 0;
  for (PyObject* a : args_steal) PyTuple_SET_ITEM(tuple, i++, a);
  PyObject* out = PyObject_Call(fn, tuple, nullptr);
  Py_DECREF(tuple);
  if (out == nullptr) throw python_error();
  Py_DECREF(out);
}

// Adopt a fresh CPU result as the payload of a new device tensor (no copy; GIL held).
at::Tensor from_cpu(const at::Tensor& result) {
  // An efficient zero tensor (sgn's gradient of a real input) has no bytes behind its sizes:
  // adopting its empty storage made every read of the result a SIGSEGV. Adopt real zeros.
  const at::Tensor r = result._is_zerotensor()
                           ? at::zeros(result.sizes(), at::TensorOptions().dtype(result.scalar_type()))
                           : result;
  c10::Storage payload = r.storage();
  auto t = empty_device_tensor(r.dtype());
  set_layout(t, t.storage(), r.sizes(), r.strides(), r.storage_offset());
  call_py(hooks.adopt, {wrap_storage(t.storage()), wrap_storage(payload),
                        PyLong_FromSize_t(payload.nbytes())});
  return t;
}

at::Tensor alias_of(const at::Tensor& base, const at::Tensor& r) {
  if (base.dtype() != r.dtype()) {  // view_as_real / view(dtype): the same bytes, another dtype
    auto t = empty_device_tensor(r.dtype());
    set_layout(t, base.storage(), r.sizes(), r.strides(), r.storage_offset());
    return t;
  }
  return at::_ops::as_strided::redispatch(kMeta, base, c10::fromIntArrayRefSlow(r.sizes()),
                                          c10::fromIntArrayRefSlow(r.strides()), c10::SymInt(r.storage_offset()));
}

struct DeviceInput {
  at::Tensor dev;
  c10::Storage payload;
};

struct Made {
  std::vector<std::pair<const c10::StorageImpl*, at::Tensor>> items;
  bool dedupe = false;
};

// CPU result -> device tensor; results aliasing an input payload become device aliases.
c10::IValue wrap_result(const c10::IValue& v, const std::vector<DeviceInput>* inputs, Made& made) {
  if (v.isTensor()) {
    const at::Tensor& r = v.toTensor();
    if (!r.defined() || !r.is_cpu()) return v;
    if (r.layout() != c10::kStrided || r.is_nested()) {
      call_py(hooks.check_result, {THPVariable_Wrap(r)});  // raises NeuronUnsupportedError
      return v;
    }
    const c10::StorageImpl* key = r.storage().unsafeGetStorageImpl();
    if (made.dedupe) {
      for (auto& [k, t] : made.items) {
        if (k == key) return alias_of(t, r);
      }
    }
    if (inputs != nullptr) {
      for (const auto& in : *inputs) {
        if (in.payload.unsafeGetStorageImpl() == key) return alias_of(in.dev, r);
      }
    }
    auto t = from_cpu(r);
    if (made.dedupe) made.items.emplace_back(key, t);
    return t;
  }
  if (v.isTensorList()) {
    bool saved = made.dedupe;
    made.dedupe = true;
    c10::List<at::Tensor> out;
    for (const at::Tensor& r : v.toTensorVector()) out.push_back(wrap_result(r, inputs, made).toTensor());
    made.dedupe = saved;
    return out;
  }
  return v;
}

// ------------------------------------------------------------------ decisions

void dtypes_of(const c10::IValue& a, c10::SmallVector<int8_t, 6>& dtypes, bool& plain) {
  if (a.isTensor()) {
    const at::Tensor& t = a.toTensor();
    if (on_device(t)) {
      if (t.layout() != c10::kStrided) plain = false;
      dtypes.push_back(static_cast<int8_t>(t.scalar_type()));
    }
  } else if (a.isTensorList() || a.isOptionalTensorList() || a.isList()) {
    for (const c10::IValue& e : a.toListRef()) {
      if (e.isTensor()) dtypes_of(e, dtypes, plain);
    }
  }
}

const Decision* decide(const c10::OperatorHandle& op, OpFacts& f, const c10::SmallVector<int8_t, 6>& dtypes,
                       Decision& scratch) {
  const uint64_t gen = generation.load(std::memory_order_acquire);
  {
    std::lock_guard lock(f.mu);
    for (const auto& d : f.decisions) {
      if (d.generation == gen && d.dtypes == dtypes) {
        scratch = d;
        return &scratch;
      }
    }
  }
  py::gil_scoped_acquire gil;
  py::tuple dt(dtypes.size());
  for (size_t i = 0; i < dtypes.size(); i++) {
    dt[i] = py::reinterpret_borrow<py::object>(
        reinterpret_cast<PyObject*>(torch::getTHPDtype(static_cast<c10::ScalarType>(dtypes[i]))));
  }
  py::handle opobj = torch::detail::getTorchApiFunction(op);
  PyObject* res = PyObject_CallFunctionObjArgs(hooks.decide, opobj.ptr(), dt.ptr(), nullptr);
  if (res == nullptr) throw python_error();
  auto owned = py::reinterpret_steal<py::object>(res);
  auto pair = owned.cast<py::tuple>();
  scratch.generation = gen;
  scratch.dtypes = dtypes;
  scratch.kind = pair[0].cast<int8_t>();
  scratch.rounded = pair[1].cast<std::vector<int>>();
  std::lock_guard lock(f.mu);
  f.decisions.erase(std::remove_if(f.decisions.begin(), f.decisions.end(),
                                   [gen](const Decision& d) { return d.generation != gen; }),
                    f.decisions.end());
  if (f.decisions.size() < 64) f.decisions.push_back(scratch);
  return &scratch;
}

// ------------------------------------------------------------------ precision

// fp32 -> nearest bf16 (ties to even) -> fp32 in one pass: the values of t.bfloat16().float(),
// with the same strides (empty_like preserves them, as .to() does), without the bf16 temporary.
at::Tensor round_bf16(const at::Tensor& t) {
  if (!t.is_non_overlapping_and_dense() || t.is_conj() || t.is_neg()) return t.to(at::kBFloat16).to(at::kFloat);
  at::Tensor out = at::empty_like(t);
  const int64_t n = t.numel();
  if (n == 0) return out;
  // both dense with the same strides: element k of memory order corresponds in the two tensors
  for (int64_t d = 0; d < t.dim(); d++) {
    if (t.stride(d) < 0) return t.to(at::kBFloat16).to(at::kFloat);
  }
  const uint32_t* src = reinterpret_cast<const uint32_t*>(t.const_data_ptr<float>());
  uint32_t* dst = reinterpret_cast<uint32_t*>(out.mutable_data_ptr<float>());
  for (int64_t i = 0; i < n; i++) {
    uint32_t v = src[i];
    if ((v & 0x7fffffffu) > 0x7f800000u) {  // NaN stays NaN
      dst[i] = 0x7fc00000u;
      continue;
    }
    v += 0x7fffu + ((v >> 16) & 1u);
    dst[i] = v & 0xffff0000u;
  }
  return out;
}

// ------------------------------------------------------------------ kernels

void python_run(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  PyObject* opobj;
  {
    py::gil_scoped_acquire gil;
    opobj = torch::detail::getTorchApiFunction(op).ptr();
  }
  call_python_kernel(op, stack, hooks.run, opobj);
}

// Converts device arguments to CPU views; false (stack untouched) if some payload is missing.
bool to_host(c10::IValue* args, size_t n, std::vector<DeviceInput>& devs) {
  py::gil_scoped_acquire gil;
  std::vector<std::pair<size_t, c10::IValue>> converted;
  for (size_t i = 0; i < n; i++) {
    c10::IValue& a = args[i];
    if (a.isTensor()) {
      const at::Tensor& t = a.toTensor();
      if (!on_device(t)) continue;
      c10::Storage payload;
      if (!payload_of(t, &payload)) return false;
      devs.push_back({t, payload});
      converted.emplace_back(i, cpu_view(t, payload));
    } else if (a.isTensorList()) {
      c10::List<at::Tensor> out;
      bool any = false;
      for (const at::Tensor& t : a.toTensorVector()) {
        if (on_device(t)) {
          c10::Storage payload;
          if (!payload_of(t, &payload)) return false;
          devs.push_back({t, payload});
          out.push_back(cpu_view(t, payload));
          any = true;
        } else {
          out.push_back(t);
        }
      }
      if (any) converted.emplace_back(i, std::move(out));
    } else if (a.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> out;
      bool any = false;
      for (const c10::IValue& e : a.toListRef()) {
        if (e.isTensor() && on_device(e.toTensor())) {
          c10::Storage payload;
          if (!payload_of(e.toTensor(), &payload)) return false;
          devs.push_back({e.toTensor(), payload});
          out.push_back(cpu_view(e.toTensor(), payload));
          any = true;
        } else {
          out.push_back(e.isTensor() ? std::optional<at::Tensor>(e.toTensor()) : std::nullopt);
        }
      }
      if (any) converted.emplace_back(i, std::move(out));
    } else if (a.isDevice() && a.toDevice().type() != c10::DeviceType::CPU) {
      converted.emplace_back(i, c10::Device(c10::DeviceType::CPU));
    }
  }
  for (auto& [i, v] : converted) args[i] = std::move(v);
  return true;
}

// After the CPU kernel wrote `cpu` (a view of `dev`'s payload): metadata changes go through Python.
void sync_written(const at::Tensor& dev, const at::Tensor& cpu, const c10::Storage& payload) {
  if (cpu.storage().unsafeGetStorageImpl() == payload.unsafeGetStorageImpl() && cpu.sizes() == dev.sizes() &&
      cpu.strides() == dev.strides() && cpu.storage_offset() == dev.storage_offset()) {
    return;
  }
  py::gil_scoped_acquire gil;
  call_py(hooks.sync_written, {THPVariable_Wrap(dev), THPVariable_Wrap(cpu)});
}

const c10::Storage* payload_in(const std::vector<DeviceInput>& devs, const at::Tensor& t) {
  for (const auto& d : devs) {
    if (d.dev.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return &d.payload;
  }
  return nullptr;
}

void device_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  OpFacts& f = facts_of(op);
  const size_t n = f.nargs;
  c10::IValue* args = stack->data() + (stack->size() - n);
  c10::SmallVector<int8_t, 6> dtypes;
  bool plain = true;
  for (size_t i = 0; i < n; i++) dtypes_of(args[i], dtypes, plain);
  if (!plain) return python_run(op, stack);
  Decision scratch;
  const Decision* d = decide(op, f, dtypes, scratch);
  if (d->kind == kSlow) return python_run(op, stack);

  std::vector<c10::IValue> original(args, args + n);
  std::vector<DeviceInput> devs;
  if (!to_host(args, n, devs)) return python_run(op, stack);
  if (d->kind == kFastRounded) {
    for (int pos : d->rounded) {
      if (pos < static_cast<int>(n) && args[pos].isTensor()) {
        const at::Tensor& t = args[pos].toTensor();
        if (t.defined() && t.scalar_type() == at::kFloat) args[pos] = round_bf16(t);
      }
    }
  }
  std::vector<c10::IValue> written_cpu;
  for (int pos : f.written) written_cpu.push_back(args[pos]);
  f.executed.fetch_add(1, std::memory_order_relaxed);
  try {
    op.callBoxed(stack);
  } catch (const c10::NotImplementedError&) {
    // a host kernel without this dtype (backend/host_kernel_gaps.yaml): Python bridges it
    f.executed.fetch_sub(1, std::memory_order_relaxed);
    stack->resize(stack->size() - std::min(stack->size(), f.nrets));
    for (auto& v : original) stack->push_back(std::move(v));
    return python_run(op, stack);
  }
  for (size_t k = 0; k < f.written.size(); k++) {
    const c10::IValue& dev = original[f.written[k]];
    const c10::IValue& cpu = written_cpu[k];
    if (dev.isTensor() && on_device(dev.toTensor())) {
      sync_written(dev.toTensor(), cpu.toTensor(), *payload_in(devs, dev.toTensor()));
    } else if (dev.isTensorList()) {
      auto dl = dev.toTensorVector();
      auto cl = cpu.toTensorVector();
      for (size_t j = 0; j < dl.size(); j++) {
        if (on_device(dl[j])) sync_written(dl[j], cl[j], *payload_in(devs, dl[j]));
      }
    }
  }
  c10::IValue* rets = stack->data() + (stack->size() - f.nrets);
  py::gil_scoped_acquire gil;  // adoption registers payloads in Python
  if (!f.returns_written) {
    Made made;
    made.dedupe = f.nrets > 1;
    const std::vector<DeviceInput>* inputs = f.view ? &devs : nullptr;
    for (size_t k = 0; k < f.nrets; k++) rets[k] = wrap_result(rets[k], inputs, made);
    return;
  }
  for (size_t k = 0; k < f.nrets; k++) {
    if (f.returns_arg[k] >= 0) {
      rets[k] = original[f.returns_arg[k]];
    } else {
      Made made;
      rets[k] = wrap_result(rets[k], &devs, made);
    }
  }
}

}  // namespace

}  // namespace neuron_native
