// IValue <-> Python, matching what PyTorch's Python kernels and dispatch modes receive.
#include "common.h"

#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

namespace neuron_native {

namespace {

bool is_default(const c10::Argument& arg, const c10::IValue& v) {
  const auto& d = arg.default_value();
  return d.has_value() && *d == v;
}

bool kind_is(const c10::Argument& arg, c10::TypeKind kind) {
  const auto& t = arg.real_type();
  if (t->kind() == kind) return true;
  if (auto opt = t->cast<c10::OptionalType>()) return opt->getElementType()->kind() == kind;
  return false;
}

py::object to_py(const c10::Argument& arg, const c10::IValue& v) {
  if (v.isNone()) return py::none();
  if (kind_is(arg, c10::ScalarTypeType::Kind)) {
    return py::reinterpret_borrow<py::object>(
        reinterpret_cast<PyObject*>(torch::getTHPDtype(static_cast<c10::ScalarType>(v.toInt()))));
  }
  if (kind_is(arg, c10::LayoutType::Kind)) {
    return py::reinterpret_borrow<py::object>(
        reinterpret_cast<PyObject*>(torch::getTHPLayout(static_cast<c10::Layout>(v.toInt()))));
  }
  if (kind_is(arg, c10::MemoryFormatType::Kind)) {
    return py::cast(static_cast<c10::MemoryFormat>(v.toInt()));
  }
  return torch::jit::toPyObject(v);
}

}  // namespace

std::pair<py::tuple, py::dict> to_py_args(const c10::FunctionSchema& schema, const c10::IValue* args,
                                          size_t n) {
  const auto& params = schema.arguments();
  size_t kwarg_start = n;
  while (kwarg_start > 0 && params[kwarg_start - 1].kwarg_only()) kwarg_start--;
  size_t positional_end = kwarg_start;
  while (positional_end > 0 && is_default(params[positional_end - 1], args[positional_end - 1])) {
    positional_end--;
  }
  py::tuple pos(positional_end);
  for (size_t i = 0; i < positional_end; i++) {
    pos[i] = to_py(params[i], args[i]);
  }
  py::dict kw;
  for (size_t i = kwarg_start; i < n; i++) {
    if (!is_default(params[i], args[i])) kw[py::str(params[i].name())] = to_py(params[i], args[i]);
  }
  return {std::move(pos), std::move(kw)};
}

void push_py_result(const c10::FunctionSchema& schema, torch::jit::Stack* stack, PyObject* out) {
  const auto& rets = schema.returns();
  if (rets.empty()) {
    TORCH_CHECK(out == Py_None, "neuron: a kernel of ", schema.name(), " returned a value, expected None");
    return;
  }
  if (rets.size() == 1) {
    stack->emplace_back(torch::jit::toIValue(out, rets[0].real_type(), std::nullopt));
    return;
  }
  auto seq = py::reinterpret_borrow<py::sequence>(out);
  TORCH_CHECK(seq.size() == rets.size(), "neuron: a kernel of ", schema.name(), " returned ", seq.size(),
              " values, expected ", rets.size());
  for (size_t i = 0; i < rets.size(); i++) {
    stack->emplace_back(torch::jit::toIValue(seq[i], rets[i].real_type(), std::nullopt));
  }
}

py::object returns_to_py(const c10::FunctionSchema& schema, const c10::IValue* rets, size_t n) {
  if (n == 0) return py::none();
  if (n == 1) return torch::jit::toPyObject(rets[0]);
  py::tuple out(n);
  for (size_t i = 0; i < n; i++) out[i] = torch::jit::toPyObject(rets[i]);
  return out;
}

std::string overload_name(const c10::OperatorHandle& op) {
  const auto& name = op.operator_name();
  std::string out = name.name;
  auto sep = out.find("::");
  if (sep != std::string::npos) out.replace(sep, 2, ".");
  out += ".";
  out += name.overload_name.empty() ? "default" : name.overload_name;
  return out;
}

void call_python_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack, PyObject* fn,
                        PyObject* prefix) {
  const auto& schema = op.schema();
  const size_t n = schema.arguments().size();
  auto arguments = torch::jit::pop(*stack, n);
  py::gil_scoped_acquire gil;
  auto [pos, kw] = to_py_args(schema, arguments.data(), n);
  py::object call_args = pos;
  if (prefix != nullptr) {
    py::tuple full(pos.size() + 1);
    full[0] = py::reinterpret_borrow<py::object>(prefix);
    for (size_t i = 0; i < pos.size(); i++) full[i + 1] = pos[i];
    call_args = full;
  }
  PyObject* out = PyObject_Call(fn, call_args.ptr(), kw.ptr());
  if (out == nullptr) throw python_error();
  auto owned = py::reinterpret_steal<py::object>(out);
  push_py_result(schema, stack, out);
}

}  // namespace neuron_native
