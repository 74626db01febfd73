// The op recorder's dispatcher hook (registry.recorder.OpRecorder with the native path).
//
// A TorchDispatchMode sees every op call at the Python dispatch key, below autograd. This hook is
// a C++ fallback at the key right below it (Fake: unused in eager programs), switched on per
// thread (and the autograd threads that inherit its dispatch state) while a recorder is active,
// so it sees exactly the calls the mode would see. A call whose fingerprint (op, and every
// argument: tensor dtype/shape/strides/offset, scalars, lists) was seen before is counted here;
// a new one goes to the Python recorder, which encodes it exactly as the mode does and says
// which of its signatures it is. Nested calls (inside a kernel, or the recorder's own Python) are
// not recorded, as with a mode.
//
// The fingerprint has exactly the equivalence of the Python recorder's (registry.recorder._fp):
// two calls get equal fingerprints here iff Python would give them equal keys (a device argument
// by its type, every NaN alike, an undefined tensor as None). So Python can key a new call by
// these bytes instead of building its own key (tuples of every argument, kept for the whole
// recording: the most of what a first sight allocated).
#include "common.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/PyInterpreter.h>
#include <torch/library.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace neuron_native {

namespace {

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& k) const noexcept {
    uint64_t h = 1469598103934665603ull;
    for (int64_t w : k) {
      h ^= static_cast<uint64_t>(w);
      h *= 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

// A double's bits, every NaN alike (Python keys a float by its repr: 'nan').
int64_t double_bits(double d) {
  if (std::isnan(d)) d = std::numeric_limits<double>::quiet_NaN();
  int64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  return bits;
}

// Appends a fingerprint of v; false when v is of a kind only Python can fingerprint.
bool fingerprint(const c10::IValue& v, std::vector<int64_t>& out) {
  if (v.isNone()) {
    out.push_back(0);
  } else if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) {
      out.push_back(0);  // Python receives None
      return true;
    }
    if (t.unsafeGetTensorImpl()->is_wrapped_number()) {  // a Python number: Python sees its value
      out.push_back(13);
      out.push_back(static_cast<int64_t>(t.scalar_type()));
      switch (t.scalar_type()) {
        case c10::ScalarType::Double:
          out.push_back(double_bits(*t.const_data_ptr<double>()));
          break;
        case c10::ScalarType::Long:
          out.push_back(*t.const_data_ptr<int64_t>());
          break;
        case c10::ScalarType::Bool:
          out.push_back(*t.const_data_ptr<bool>());
          break;
        default:
          return false;
      }
      return true;
    }
    const bool strided = t.layout() == c10::kStrided;
    out.push_back(strided ? 2 : 3);
    out.push_back(static_cast<int64_t>(t.scalar_type()));
    out.push_back(static_cast<int64_t>(t.layout()));
    out.push_back(static_cast<int64_t>(t.device().type()));
    out.push_back(t.dim());
    for (int64_t s : t.sizes()) out.push_back(s);
    if (strided) {
      for (int64_t s : t.strides()) out.push_back(s);
      out.push_back(t.storage_offset());
    }
  } else if (v.isBool()) {
    out.push_back(4);
    out.push_back(v.toBool());
  } else if (v.isInt()) {
    out.push_back(5);
    out.push_back(v.toInt());
  } else if (v.isDouble()) {
    out.push_back(6);
    out.push_back(double_bits(v.toDouble()));
  } else if (v.isString()) {
    const std::string& s = v.toStringRef();
    out.push_back(7);
    out.push_back(static_cast<int64_t>(s.size()));
    for (size_t i = 0; i < s.size(); i += 8) {
      int64_t w = 0;
      std::memcpy(&w, s.data() + i, std::min<size_t>(8, s.size() - i));
      out.push_back(w);
    }
  } else if (v.isDevice()) {
    out.push_back(8);
    out.push_back(static_cast<int64_t>(v.toDevice().type()));  // Python keys a device by its type
  } else if (v.isComplexDouble()) {
    out.push_back(9);
    auto c = v.toComplexDouble();
    out.push_back(double_bits(c.real()));
    out.push_back(double_bits(c.imag()));
  } else if (v.isIntList()) {
    out.push_back(10);
    auto l = v.toIntList();
    out.push_back(static_cast<int64_t>(l.size()));
    for (int64_t x : l) out.push_back(x);
  } else if (v.isList() || v.isTuple()) {
    out.push_back(v.isTuple() ? 11 : 12);
    auto items = v.isTuple() ? v.toTupleRef().elements() : v.toListRef();
    out.push_back(static_cast<int64_t>(items.size()));
    for (const auto& item : items) {
      if (!fingerprint(item, out)) return false;
    }
  } else {
    return false;  // generators, storages, script objects, ...: Python fingerprints them
  }
  return true;
}

struct Recorder {
  PyObject* first = nullptr;    // OpRecorder._native_first(func, args, kwargs, key) -> (index, wants_outputs)
  PyObject* outputs = nullptr;  // OpRecorder._native_outputs(index, outputs)
  bool paused = false;
  int phase = 0;
  int64_t calls = 0;
  std::unordered_map<std::vector<int64_t>, int, KeyHash> known;
  std::vector<std::vector<int64_t>> counts;  // signature index -> per phase

  ~Recorder() {
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      Py_XDECREF(first);
      Py_XDECREF(outputs);
    }
  }

  void count(int index) {
    if (index >= static_cast<int>(counts.size())) counts.resize(index + 1);
    auto& c = counts[index];
    if (phase >= static_cast<int>(c.size())) c.resize(phase + 1, 0);
    c[phase]++;
    calls++;
  }
};

std::mutex recorder_mu;
Recorder* active = nullptr;  // at most one native recorder records at a time

const c10::DispatchKeySet kAfterHook(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::Fake);

void record_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  c10::impl::ExcludeDispatchKeyGuard nested(c10::DispatchKey::Fake);  // calls inside are not the model's
  const c10::DispatchKeySet next = ks & kAfterHook;
  Recorder* rec;
  {
    std::lock_guard lock(recorder_mu);
    rec = active;
  }
  const auto& name = op.operator_name().name;
  if (rec == nullptr || rec->paused || name.compare(0, 6, "aten::") != 0) {
    op.redispatchBoxed(next, stack);
    return;
  }
  const auto& schema = op.schema();
  const size_t n = schema.arguments().size();
  const c10::IValue* args = stack->data() + (stack->size() - n);
  std::vector<int64_t> key;
  key.reserve(32);
  key.push_back(reinterpret_cast<int64_t>(&schema));
  bool cacheable = true;
  for (size_t i = 0; i < n && cacheable; i++) cacheable = fingerprint(args[i], key);
  if (cacheable) {
    int index = -1;
    {
      std::lock_guard lock(recorder_mu);
      auto it = rec->known.find(key);
      if (it != rec->known.end()) index = it->second;
    }
    if (index >= 0) {
      op.redispatchBoxed(next, stack);  // counted once it returned, as the mode counts
      std::lock_guard lock(recorder_mu);
      rec->count(index);
      return;
    }
  }
  int index;
  bool wants_outputs;
  {
    py::gil_scoped_acquire gil;
    auto [pos, kw] = to_py_args(schema, args, n);
    py::handle func = torch::detail::getTorchApiFunction(op);
    // the fingerprint's bytes (None: Python fingerprints the call itself)
    py::object key_bytes = cacheable ? py::object(py::bytes(reinterpret_cast<const char*>(key.data()),
                                                             key.size() * sizeof(int64_t)))
                                     : py::object(py::none());
    PyObject* res = PyObject_CallFunctionObjArgs(rec->first, func.ptr(), pos.ptr(), kw.ptr(), key_bytes.ptr(),
                                                 nullptr);
    if (res == nullptr) throw python_error();
    auto owned = py::reinterpret_steal<py::tuple>(res);
    index = owned[0].cast<int>();
    wants_outputs = owned[1].cast<bool>();
  }
  op.redispatchBoxed(next, stack);
  if (wants_outputs) {
    const size_t r = schema.returns().size();
    py::gil_scoped_acquire gil;
    py::object outs = returns_to_py(schema, stack->data() + (stack->size() - r), r);
    PyObject* res = PyObject_CallFunctionObjArgs(rec->outputs, py::int_(index).ptr(), outs.ptr(), nullptr);
    if (res == nullptr) throw python_error();
    Py_DECREF(res);
  }
  std::lock_guard lock(recorder_mu);
  if (cacheable) rec->known.emplace(std::move(key), index);
  rec->count(index);
}

std::unique_ptr<torch::Library> hook_library;

}  // namespace

// Python handle of one recorder's native state (registry.recorder keeps one per OpRecorder).
class NativeRecorder {
 public:
  NativeRecorder(py::object first, py::object outputs) {
    rec_.first = first.release().ptr();
    rec_.outputs = outputs.release().ptr();
  }
  ~NativeRecorder() { stop(); }

  // Record on this thread (and the autograd threads it starts); false if another recorder is on.
  bool start() {
    {
      std::lock_guard lock(recorder_mu);
      if (active != nullptr && active != &rec_) return false;
      active = &rec_;
    }
    if (!hook_library) {
      hook_library = std::make_unique<torch::Library>(torch::Library::IMPL, "_", c10::DispatchKey::Fake, __FILE__,
                                                      __LINE__);
      hook_library->fallback(torch::CppFunction::makeFromBoxedFunction<&record_kernel>());
    }
    was_included_ = c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::Fake);
    c10::impl::tls_set_dispatch_key_included(c10::DispatchKey::Fake, true);
    started_ = true;
    return true;
  }

  void stop() {
    if (!started_) return;
    c10::impl::tls_set_dispatch_key_included(c10::DispatchKey::Fake, was_included_);
    std::lock_guard lock(recorder_mu);
    if (active == &rec_) active = nullptr;
    started_ = false;
  }

  void set_phase(int phase) {
    std::lock_guard lock(recorder_mu);
    rec_.phase = phase;
  }

  void set_paused(bool paused) {
    std::lock_guard lock(recorder_mu);
    rec_.paused = paused;
  }

  // (signature index, phase, count) since the last take, and the number of calls; resets both.
  std::pair<std::vector<std::tuple<int, int, int64_t>>, int64_t> take_counts() {
    std::lock_guard lock(recorder_mu);
    std::vector<std::tuple<int, int, int64_t>> out;
    for (size_t i = 0; i < rec_.counts.size(); i++) {
      for (size_t p = 0; p < rec_.counts[i].size(); p++) {
        if (rec_.counts[i][p]) out.emplace_back(static_cast<int>(i), static_cast<int>(p), rec_.counts[i][p]);
      }
    }
    rec_.counts.clear();
    int64_t calls = rec_.calls;
    rec_.calls = 0;
    return {std::move(out), calls};
  }

 private:
  Recorder rec_;
  bool started_ = false;
  bool was_included_ = false;
};

void bind_recorder(py::module& m) {
  py::class_<NativeRecorder>(m, "NativeRecorder")
      .def(py::init<py::object, py::object>())
      .def("start", &NativeRecorder::start)
      .def("stop", &NativeRecorder::stop)
      .def("set_phase", &NativeRecorder::set_phase)
      .def("set_paused", &NativeRecorder::set_paused)
      .def("take_counts", &NativeRecorder::take_counts);
}

}  // namespace neuron_native
