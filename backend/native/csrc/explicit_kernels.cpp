// The device's explicit C++ kernels (the hot ones of backend/explicit.py: views, allocation,
// copies, clone), the C++ device guard and the installation of every kernel. Part of the unity
// build (neuron_native.cpp), after device.cpp, whose helpers it uses.
#include "common.h"

namespace neuron_native {

namespace {

// Views are metadata only: the Meta kernel builds the alias (same storage, no bounds check).
void view_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  facts_of(op).executed.fetch_add(1, std::memory_order_relaxed);
  op.redispatchBoxed(kMeta, stack);
}

void explicit_python(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  PyObject* fn = hooks.explicit_py.at(op.schema().name().substr(6) +
                                      (op.schema().overload_name().empty() ? "" : "." + op.schema().overload_name()));
  call_python_kernel(op, stack, fn, nullptr);
}

int64_t contiguous_nbytes(c10::IntArrayRef size, c10::IntArrayRef stride, int64_t itemsize) {
  int64_t span = 1;
  for (size_t i = 0; i < size.size(); i++) {
    if (size[i] == 0) return 0;
    span += (size[i] - 1) * stride[i];
  }
  return span * itemsize;
}

at::Tensor new_device_tensor(c10::IntArrayRef size, c10::IntArrayRef stride, c10::ScalarType dtype) {
  const int64_t nbytes = contiguous_nbytes(size, stride, c10::elementSize(dtype));
  py::gil_scoped_acquire gil;
  call_py(hooks.allocate, {PyLong_FromLongLong(nbytes)});
  c10::Storage payload;
  try {
    payload = at::empty({nbytes}, at::TensorOptions().dtype(at::kByte)).storage();
  } catch (...) {
    call_py(hooks.free, {PyLong_FromLongLong(nbytes)});
    throw;
  }
  auto t = empty_device_tensor(c10::scalarTypeToTypeMeta(dtype));
  set_layout(t, t.storage(), size, stride, 0);
  call_py(hooks.track, {wrap_storage(t.storage()), wrap_storage(payload), PyLong_FromLongLong(nbytes)});
  return t;
}

bool plain_layout(const c10::IValue& layout) {
  return layout.isNone() || static_cast<c10::Layout>(layout.toInt()) == c10::kStrided;
}

c10::ScalarType dtype_or_default(const c10::IValue& dtype) {
  return dtype.isNone() ? c10::typeMetaToScalarType(c10::get_default_dtype())
                        : static_cast<c10::ScalarType>(dtype.toInt());
}

// empty.memory_format(SymInt[] size, *, ScalarType? dtype, Layout? layout, Device? device,
//                     bool? pin_memory, MemoryFormat? memory_format)
void empty_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  c10::IValue* a = stack->data() + (stack->size() - 6);
  bool plain = a[0].isIntList() && plain_layout(a[2]);
  if (plain && !a[5].isNone()) {
    auto mf = static_cast<c10::MemoryFormat>(a[5].toInt());
    plain = mf == c10::MemoryFormat::Contiguous || mf == c10::MemoryFormat::Preserve;
  }
  if (!plain) return explicit_python(op, stack);
  facts_of(op).executed.fetch_add(1, std::memory_order_relaxed);
  std::vector<int64_t> size = a[0].toIntVector();
  auto stride = c10::contiguous_strides(size);
  auto t = new_device_tensor(size, c10::IntArrayRef(stride), dtype_or_default(a[1]));
  torch::jit::drop(*stack, 6);
  stack->emplace_back(std::move(t));
}

// empty_strided(SymInt[] size, SymInt[] stride, *, ScalarType? dtype, Layout? layout, Device? device,
//               bool? pin_memory)
void empty_strided_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  c10::IValue* a = stack->data() + (stack->size() - 6);
  if (!(a[0].isIntList() && a[1].isIntList() && plain_layout(a[3]))) return explicit_python(op, stack);
  facts_of(op).executed.fetch_add(1, std::memory_order_relaxed);
  auto t = new_device_tensor(a[0].toIntVector(), a[1].toIntVector(), dtype_or_default(a[2]));
  torch::jit::drop(*stack, 6);
  stack->emplace_back(std::move(t));
}

bool plain_tensor(const at::Tensor& t) { return t.layout() == c10::kStrided && !t.is_nested(); }

// _copy_from(Tensor self, Tensor dst, bool non_blocking=False) -> Tensor: host<->device, device<->device
void copy_from_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  c10::IValue* a = stack->data() + (stack->size() - 3);
  const at::Tensor& src = a[0].toTensor();
  const at::Tensor& dst = a[1].toTensor();
  if (!plain_tensor(src) || !plain_tensor(dst)) return explicit_python(op, stack);
  at::Tensor src_host = src, dst_host = dst;
  {
    py::gil_scoped_acquire gil;
    c10::Storage p;
    if (on_device(src)) {
      if (!payload_of(src, &p)) return explicit_python(op, stack);
      src_host = cpu_view(src, p);
    }
    if (on_device(dst)) {
      if (!payload_of(dst, &p)) return explicit_python(op, stack);
      dst_host = cpu_view(dst, p);
    }
  }
  facts_of(op).executed.fetch_add(1, std::memory_order_relaxed);
  dst_host.copy_(src_host);
  at::Tensor out = dst;
  torch::jit::drop(*stack, 3);
  stack->emplace_back(std::move(out));
}

// clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor
void clone_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  c10::IValue* a = stack->data() + (stack->size() - 2);
  const at::Tensor& self = a[0].toTensor();
  if (!plain_tensor(self)) return explicit_python(op, stack);
  std::optional<c10::MemoryFormat> mf;
  if (!a[1].isNone()) mf = static_cast<c10::MemoryFormat>(a[1].toInt());
  py::gil_scoped_acquire gil;
  c10::Storage p;
  if (!payload_of(self, &p)) {
    py::gil_scoped_release release;
    return explicit_python(op, stack);
  }
  facts_of(op).executed.fetch_add(1, std::memory_order_relaxed);
  at::Tensor copy;
  {
    py::gil_scoped_release release;
    copy = cpu_view(self, p).clone(mf);
  }
  at::Tensor out = from_cpu(copy);
  torch::jit::drop(*stack, 2);
  stack->emplace_back(std::move(out));
}

// ------------------------------------------------------------------ device guard

// The C++ guard replaces the Python one that _setup_privateuseone_for_python_backend registers:
// nearly every op asks it for the device type, which through Python costs a GIL round trip.
struct Guard final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDevice; }
  c10::Device exchangeDevice(c10::Device) const override { return c10::Device(kDevice, 0); }
  c10::Device getDevice() const override { return c10::Device(kDevice, 0); }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kDevice, 0));
  }
  c10::Stream getNewStream(c10::Device, int) const override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kDevice, 0));
  }
  c10::Stream exchangeStream(c10::Stream) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kDevice, 0));
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
};
Guard guard;

std::vector<std::unique_ptr<torch::Library>> libraries;  // registrations live as long as the process

PyObject* owned(py::handle h) {
  Py_INCREF(h.ptr());
  return h.ptr();
}

}  // namespace

// ------------------------------------------------------------------ for the executor (executor.cpp)

at::Tensor rounded_bf16(const at::Tensor& t) { return round_bf16(t); }
bool device_payload(const at::Tensor& t, c10::Storage* out) { return payload_of(t, out); }
at::Tensor host_view(const at::Tensor& dev, const c10::Storage& payload) { return cpu_view(dev, payload); }
at::Tensor adopt_host_result(const at::Tensor& r) { return from_cpu(r); }

// ------------------------------------------------------------------ Python API

void install_device(py::dict py_hooks, const std::vector<std::string>& direct_ops, py::dict explicit_python_kernels) {
  TORCH_CHECK(!installed, "neuron native device path is already installed");
  hooks.entries = owned(py_hooks["entries"]);
  hooks.adopt = owned(py_hooks["adopt"]);
  hooks.track = owned(py_hooks["track"]);
  hooks.allocate = owned(py_hooks["allocate"]);
  hooks.free = owned(py_hooks["free"]);
  hooks.run = owned(py_hooks["run"]);
  hooks.decide = owned(py_hooks["decide"]);
  hooks.sync_written = owned(py_hooks["sync_written"]);
  hooks.check_result = owned(py_hooks["check_result"]);
  for (auto item : explicit_python_kernels) {
    hooks.explicit_py[item.first.cast<std::string>()] = owned(item.second);
  }
  auto fb = std::make_unique<torch::Library>(torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1, __FILE__,
                                             __LINE__);
  fb->fallback(torch::CppFunction::makeFromBoxedFunction<&device_kernel>());
  auto impl = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                               __FILE__, __LINE__);
  for (const auto& name : direct_ops) impl->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&device_kernel>());
  for (const char* name : {"view", "as_strided", "_reshape_alias"}) {
    impl->impl(name, torch::CppFunction::makeFromBoxedFunction<&view_kernel>());
  }
  impl->impl("empty.memory_format", torch::CppFunction::makeFromBoxedFunction<&empty_kernel>());
  impl->impl("empty_strided", torch::CppFunction::makeFromBoxedFunction<&empty_strided_kernel>());
  impl->impl("_copy_from", torch::CppFunction::makeFromBoxedFunction<&copy_from_kernel>());
  impl->impl("clone", torch::CppFunction::makeFromBoxedFunction<&clone_kernel>());
  libraries.push_back(std::move(fb));
  libraries.push_back(std::move(impl));
  c10::impl::registerDeviceGuard(kDevice, &guard);
  installed = true;
}

void invalidate_decisions() { generation.fetch_add(1, std::memory_order_acq_rel); }

std::vector<std::pair<std::string, int64_t>> executed_counts() {
  std::vector<std::pair<std::string, int64_t>> out;
  std::shared_lock lock(facts_mu);
  for (const auto& [_, f] : facts_table) {
    int64_t n = f->executed.load(std::memory_order_relaxed);
    if (n) out.emplace_back(f->name, n);
  }
  return out;
}

void clear_executed() {
  std::shared_lock lock(facts_mu);
  for (const auto& [_, f] : facts_table) f->executed.store(0, std::memory_order_relaxed);
}

at::Tensor py_from_cpu(const at::Tensor& r) {
  TORCH_CHECK(installed, "neuron native device path is not installed");
  return from_cpu(r);
}

bool is_installed() { return installed; }

}  // namespace neuron_native
