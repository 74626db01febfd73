// Shared pieces of the native fast path: IValue <-> Python conversion as PyTorch's Python kernels
// see it, and small helpers. Everything that decides *what* the device does stays in Python;
// the native code only repeats decisions Python made and cached.
#pragma once

#include <torch/csrc/python_headers.h>
#include <torch/csrc/Export.h>

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <pybind11/pybind11.h>

#include <string>
#include <utility>

namespace torch::jit {
// libtorch_python exports these (torch/csrc/jit/python/pybind_utils.h, not included: it is huge)
TORCH_PYTHON_API pybind11::object toPyObject(c10::IValue ivalue);
TORCH_PYTHON_API c10::IValue toIValue(pybind11::handle obj, const c10::TypePtr& type,
                                      std::optional<int32_t> N);
}  // namespace torch::jit

namespace neuron_native {

namespace py = pybind11;

// (args, kwargs) exactly as PyTorch hands them to a Python kernel or a TorchDispatchMode:
// positional arguments up to the last non-default one, keyword-only arguments that differ from
// their default as keywords; dtype/layout/memory_format arguments as their Python objects.
std::pair<py::tuple, py::dict> to_py_args(const c10::FunctionSchema& schema, const c10::IValue* args,
                                          size_t n);

// Push a Python kernel's result onto the stack, typed by the schema's returns.
void push_py_result(const c10::FunctionSchema& schema, torch::jit::Stack* stack, PyObject* out);

// The schema's returns (top of the stack) as Python objects: one object, a tuple, or None.
py::object returns_to_py(const c10::FunctionSchema& schema, const c10::IValue* rets, size_t n);

// "aten.add.Tensor": the overload name Python code uses (str(OpOverload)).
std::string overload_name(const c10::OperatorHandle& op);

// Call a Python function with (prefix..., *args, **kwargs) converted from the stack, push its
// result. GIL must not be held. Raises (python_error) what the Python function raised.
void call_python_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack, PyObject* fn,
                        PyObject* prefix /* nullable */);

}  // namespace neuron_native
