// A compiled partition run as a flat program of aten calls (backend/neff/runtime.py builds it
// from the same graph as the FX executable): no Python per node. The same kernels run in the
// same order on the same host tensors as the FX code, with the artifact's bf16 rule applied to
// the same arguments, so results are identical to the pure-Python executable.
#include "common.h"

#include <ATen/core/ivalue.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <memory>
#include <vector>

namespace neuron_native {

at::Tensor rounded_bf16(const at::Tensor& t);                     // device.cpp
bool device_payload(const at::Tensor& t, c10::Storage* out);     // device.cpp (GIL held)
at::Tensor host_view(const at::Tensor& dev, const c10::Storage& payload);
at::Tensor adopt_host_result(const at::Tensor& r);               // device.cpp (GIL held)

namespace {

struct ArgSpec {
  enum Kind { kConst, kRef, kTensorList, kOptionalTensorList } kind = kConst;
  c10::IValue value;            // kConst
  int slot = -1;                // kRef
  std::vector<ArgSpec> items;   // lists: kConst (None / a constant tensor) or kRef items
};

struct Instr {
  enum Kind { kCall, kGetItem } kind = kCall;
  std::optional<c10::OperatorHandle> op;
  std::vector<ArgSpec> args;    // one per schema argument (defaults filled in)
  std::vector<int> rounded;     // argument positions rounded to bf16
  size_t nrets = 0;
  int src = -1, index = 0;      // kGetItem
  int out = -1;
};

c10::IValue fetch(const ArgSpec& a, const std::vector<c10::IValue>& env) {
  switch (a.kind) {
    case ArgSpec::kConst:
      return a.value;
    case ArgSpec::kRef:
      return env[a.slot];
    case ArgSpec::kTensorList: {
      c10::List<at::Tensor> l;
      l.reserve(a.items.size());
      for (const auto& it : a.items) l.push_back(fetch(it, env).toTensor());
      return l;
    }
    case ArgSpec::kOptionalTensorList: {
      c10::List<std::optional<at::Tensor>> l;
      l.reserve(a.items.size());
      for (const auto& it : a.items) {
        c10::IValue v = fetch(it, env);
        l.push_back(v.isNone() ? std::nullopt : std::optional<at::Tensor>(v.toTensor()));
      }
      return l;
    }
  }
  return c10::IValue();
}

ArgSpec parse_arg(py::handle spec, const c10::Argument* schema_arg) {
  // spec: ("const", value) | ("ref", slot) | ("list", [specs]) | ("optlist", [specs])
  auto t = py::reinterpret_borrow<py::tuple>(spec);
  std::string kind = t[0].cast<std::string>();
  ArgSpec a;
  if (kind == "ref") {
    a.kind = ArgSpec::kRef;
    a.slot = t[1].cast<int>();
  } else if (kind == "list" || kind == "optlist") {
    a.kind = kind == "list" ? ArgSpec::kTensorList : ArgSpec::kOptionalTensorList;
    for (auto item : t[1]) a.items.push_back(parse_arg(item, nullptr));
  } else if (schema_arg != nullptr) {
    a.value = torch::jit::toIValue(t[1], schema_arg->real_type(), std::nullopt);
  } else {  // a list item: None or a tensor
    a.value = t[1].is_none() ? c10::IValue() : c10::IValue(t[1].cast<at::Tensor>());
  }
  return a;
}

}  // namespace

class Program {
 public:
  // instrs: ("call", "aten::mm", "overload", [arg specs or None for a default], [rounded], out)
  //       | ("getitem", src, index, out); outputs: [arg specs]
  Program(int ninputs, int nslots, py::list instrs, py::list outputs) : ninputs_(ninputs), nslots_(nslots) {
    for (auto item : instrs) {
      auto t = item.cast<py::tuple>();
      Instr ins;
      if (t[0].cast<std::string>() == "getitem") {
        ins.kind = Instr::kGetItem;
        ins.src = t[1].cast<int>();
        ins.index = t[2].cast<int>();
        ins.out = t[3].cast<int>();
      } else {
        ins.op = c10::Dispatcher::singleton().findSchemaOrThrow(t[1].cast<std::string>().c_str(),
                                                                 t[2].cast<std::string>().c_str());
        const auto& schema = ins.op->schema();
        auto specs = t[3].cast<py::list>();
        TORCH_CHECK(specs.size() == schema.arguments().size(), "neuron program: ", schema.name(),
                    " expects ", schema.arguments().size(), " arguments");
        for (size_t i = 0; i < specs.size(); i++) {
          const auto& arg = schema.arguments()[i];
          if (specs[i].is_none()) {
            TORCH_CHECK(arg.default_value().has_value(), "neuron program: ", schema.name(), " argument ",
                        arg.name(), " has no default");
            ArgSpec a;
            a.value = *arg.default_value();
            ins.args.push_back(std::move(a));
          } else {
            ins.args.push_back(parse_arg(specs[i], &arg));
          }
        }
        ins.rounded = t[4].cast<std::vector<int>>();
        ins.nrets = schema.returns().size();
        ins.out = t[5].cast<int>();
      }
      instrs_.push_back(std::move(ins));
    }
    for (auto o : outputs) outputs_.push_back(parse_arg(o, nullptr));
  }

  std::vector<c10::IValue> run(std::vector<c10::IValue> inputs) const {
    TORCH_CHECK(static_cast<int>(inputs.size()) == ninputs_, "neuron program takes ", ninputs_, " inputs, got ",
                inputs.size());
    std::vector<c10::IValue> env(nslots_);
    for (int i = 0; i < ninputs_; i++) env[i] = std::move(inputs[i]);
    torch::jit::Stack stack;
    for (const auto& ins : instrs_) {
      if (ins.kind == Instr::kGetItem) {
        const c10::IValue& v = env[ins.src];
        env[ins.out] = v.isTuple() ? v.toTupleRef().elements()[ins.index] : v.toListRef()[ins.index];
        continue;
      }
      stack.clear();
      for (const auto& a : ins.args) stack.push_back(fetch(a, env));
      for (int pos : ins.rounded) {
        c10::IValue& v = stack[pos];
        if (v.isTensor() && v.toTensor().defined() && v.toTensor().scalar_type() == at::kFloat) {
          v = rounded_bf16(v.toTensor());
        }
      }
      ins.op->callBoxed(stack);
      if (ins.nrets == 1) {
        env[ins.out] = std::move(stack[0]);
      } else {
        env[ins.out] = c10::ivalue::Tuple::create(std::vector<c10::IValue>(stack.begin(), stack.end()));
      }
    }
    std::vector<c10::IValue> out;
    out.reserve(outputs_.size());
    for (const auto& o : outputs_) out.push_back(fetch(o, env));
    return out;
  }

  // Host tensors in, host values out (the FX executable's calling convention).
  py::list run_host(py::sequence args) const {
    std::vector<c10::IValue> inputs;
    for (auto a : args) inputs.push_back(torch::jit::toIValue(a, c10::AnyType::get(), std::nullopt));
    std::vector<c10::IValue> out;
    {
      py::gil_scoped_release release;
      out = run(std::move(inputs));
    }
    py::list result;
    for (auto& v : out) result.append(torch::jit::toPyObject(std::move(v)));
    return result;
  }

  // Device tensors in (host views of their payloads), outputs flagged `on_device` adopted as
  // device tensors (no copy), the others returned as host values: one call per partition.
  py::list run_device(py::sequence args, const std::vector<bool>& on_device) const {
    std::vector<c10::IValue> inputs;
    for (auto a : args) {
      if (THPVariable_Check(a.ptr())) {
        const at::Tensor& t = THPVariable_Unpack(a.ptr());
        if (t.defined() && t.device().type() == c10::DeviceType::PrivateUse1) {
          c10::Storage payload;
          TORCH_CHECK(device_payload(t, &payload),
                      "neuron: tensor has no device payload (it was not created by the neuron device, or its "
                      "storage was freed)");
          inputs.emplace_back(host_view(t, payload));
          continue;
        }
      }
      inputs.push_back(torch::jit::toIValue(a, c10::AnyType::get(), std::nullopt));
    }
    std::vector<c10::IValue> out;
    {
      py::gil_scoped_release release;
      out = run(std::move(inputs));
    }
    TORCH_CHECK(out.size() == on_device.size(), "neuron program: ", out.size(), " outputs, ", on_device.size(),
                " flags");
    py::list result;
    for (size_t i = 0; i < out.size(); i++) {
      if (on_device[i] && out[i].isTensor() && out[i].toTensor().defined()) {
        result.append(py::reinterpret_steal<py::object>(THPVariable_Wrap(adopt_host_result(out[i].toTensor()))));
      } else {
        result.append(torch::jit::toPyObject(std::move(out[i])));
      }
    }
    return result;
  }

 private:
  int ninputs_, nslots_;
  std::vector<Instr> instrs_;
  std::vector<ArgSpec> outputs_;
};

void bind_executor(py::module& m) {
  py::class_<Program, std::shared_ptr<Program>>(m, "Program")
      .def(py::init<int, int, py::list, py::list>())
      .def("run_host", &Program::run_host)
      .def("run_device", &Program::run_device);
}

}  // namespace neuron_native
