// The `neuron_native` extension module: the device fast path (device.cpp) and the op recorder's
// dispatch hook (recorder.cpp). Loaded and installed by backend/native/__init__.py.
#include "common.h"

#include <torch/csrc/utils/pybind.h>

namespace neuron_native {
void install_device(py::dict hooks, const std::vector<std::string>& direct_ops, py::dict explicit_python_kernels);
void invalidate_decisions();
std::vector<std::pair<std::string, int64_t>> executed_counts();
void clear_executed();
at::Tensor py_from_cpu(const at::Tensor& r);
bool is_installed();
void bind_recorder(py::module& m);
void bind_executor(py::module& m);
}  // namespace neuron_native

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace nn = neuron_native;
  m.doc() = "native fast path of the simulated neuron device";
  m.def("install_device", &nn::install_device, "register the native device kernels (once per process)");
  m.def("invalidate_decisions", &nn::invalidate_decisions, "forget cached per-op decisions");
  m.def("executed_counts", &nn::executed_counts, "(op, count) of ops the native path ran");
  m.def("clear_executed", &nn::clear_executed);
  m.def("from_cpu", &nn::py_from_cpu, "adopt a fresh CPU tensor as a device tensor (no copy)");
  m.def("is_installed", &nn::is_installed);
  nn::bind_recorder(m);
  nn::bind_executor(m);
}
