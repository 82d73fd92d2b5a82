// ballast.torch._C: the Python bindings of session.h. Pure glue: argument conversion,
// absl::Status to Python exceptions (INVALID_ARGUMENT and OUT_OF_RANGE become ValueError,
// everything else RuntimeError with the code name), and the GIL released around every
// call that may wait on a collective. The Python package (ballast/torch/*.py) is the API.
#include <torch/csrc/utils/pybind.h>
#include <torch/extension.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ballast/parallel_attention.h"
#include "ballast/parallel_mlp.h"
#include "ballast/parallel_moe.h"
#include "session.h"

namespace py = pybind11;

namespace ballast::torch_adapter {
namespace {

void Check(const absl::Status& status) {
  if (status.ok()) return;
  const std::string message(status.message());
  if (status.code() == absl::StatusCode::kInvalidArgument ||
      status.code() == absl::StatusCode::kOutOfRange) {
    throw py::value_error(message);
  }
  throw std::runtime_error(absl::StrCat(absl::StatusCodeToString(status.code()), ": ", message));
}

template <typename T>
T Value(absl::StatusOr<T> value) {
  Check(value.status());
  return *std::move(value);
}

// Runs `call` without the GIL: collectives wait on peers, and other Python threads (data
// loaders, the user's own) must keep running meanwhile.
template <typename F>
auto Released(F&& call) {
  py::gil_scoped_release release;
  return call();
}

ParamField ParseField(const std::string& name) {
  if (name == "value") return ParamField::kValue;
  if (name == "grad") return ParamField::kGrad;
  if (name == "adam_m") return ParamField::kAdamM;
  if (name == "adam_v") return ParamField::kAdamV;
  throw py::value_error(absl::StrCat("unknown field '", name, "' (value, grad, adam_m, adam_v)"));
}

UnitConfig ParseUnits(int64_t seed, const std::string& priority, int32_t priority_window,
                      const std::vector<int32_t>& owner_of_unit, bool recompute,
                      bool keep_gradients) {
  UnitConfig units;
  units.seed = static_cast<uint64_t>(seed);
  units.priority = Value(ParsePriority(priority));
  units.priority_window = priority_window;
  for (int32_t r : owner_of_unit) units.owner_of_unit.push_back(RankId(r));
  units.recompute = recompute;
  units.keep_gradients = keep_gradients;
  return units;
}

GemmPrecision ParsePrecision(const std::string& name) {
  if (name == "fp32") return GemmPrecision::kFp32;
  if (name == "bf16") return GemmPrecision::kBf16;
  if (name == "fp16") return GemmPrecision::kFp16;
  throw py::value_error("gemm_precision '" + name + "' is not one of fp32, bf16, fp16");
}

MlpActivation ParseActivation(const std::string& name) {
  if (name == "gelu") return MlpActivation::kGelu;
  if (name == "swiglu") return MlpActivation::kSwiGlu;
  throw py::value_error("activation '" + name + "' is not one of gelu, swiglu");
}

// The name of a Python value's type, for errors.
std::string TypeName(const py::handle& value) {
  return py::str(value.get_type().attr("__name__")).cast<std::string>();
}

// A plan block's "replicas": [{"unit", "helper", "share"}] (BlockPlan::replicas). Only the
// types are checked here, each error naming the field (`where`: "blocks[i].replicas");
// whether the values fit the block (a unit it has, a share in (0, 1], a helper that is not
// the owner, ...) is the plan validator's, as for a plan from the agent.
std::vector<Replica> ParseReplicas(const py::handle& value, const std::string& where) {
  if (!py::isinstance<py::list>(value) && !py::isinstance<py::tuple>(value)) {
    throw py::value_error(absl::StrCat(
        where, " must be a list of {unit, helper, share} dicts, not ", TypeName(value)));
  }
  std::vector<Replica> replicas;
  for (const py::handle& item : value) {
    const std::string at = absl::StrCat(where, "[", replicas.size(), "]");
    if (!py::isinstance<py::dict>(item)) {
      throw py::value_error(
          absl::StrCat(at, " must be a dict {unit, helper, share}, not ", TypeName(item)));
    }
    Replica& r = replicas.emplace_back();
    bool unit = false, helper = false, share = false;
    for (const auto& [key_handle, field] : item.cast<py::dict>()) {
      const std::string key = py::str(key_handle);
      // pybind11's casts refuse a float for an int (and a str for either); its cast_error
      // would not say which field, so it is turned into one that does.
      try {
        if (key == "unit") {
          r.unit = field.cast<int32_t>();
          unit = true;
        } else if (key == "helper") {
          r.helper = RankId(field.cast<int32_t>());
          helper = true;
        } else if (key == "share") {
          r.share = field.cast<double>();
          share = true;
        } else {
          throw py::value_error(
              absl::StrCat(at, " has unknown key '", key, "' (unit, helper, share)"));
        }
      } catch (const py::cast_error&) {
        throw py::value_error(absl::StrCat(at, ".", key, " must be ",
                                           key == "share" ? "a number" : "a 32-bit int", ", not ",
                                           py::repr(field).cast<std::string>()));
      }
    }
    for (const auto& [name, present] :
         {std::pair{"unit", unit}, std::pair{"helper", helper}, std::pair{"share", share}}) {
      if (!present) throw py::value_error(absl::StrCat(at, " has no '", name, "'"));
    }
  }
  return replicas;
}

// A plan from Python: blocks as dicts {"block", "pruned_units", "offloads": [(owner,
// helper, units)], "owner_of_unit", "replicas": [{"unit", "helper", "share"}],
// "capacity_factor"}; unknown keys are refused by name. As for replicas, only types are
// checked here; the values are the plan validator's.
WorkloadPlan ParsePlan(const std::string& group, int64_t version, const std::string& imputation,
                       const std::optional<std::string>& priority, const py::list& blocks) {
  WorkloadPlan plan;
  plan.group = GroupId(group);
  plan.version = PlanVersion(version);
  plan.imputation = Value(ParseImputation(imputation));
  if (priority.has_value()) plan.priority = Value(ParsePriority(*priority));
  for (const py::handle& item : blocks) {
    if (!py::isinstance<py::dict>(item)) throw py::value_error("each plan block must be a dict");
    const size_t index = plan.blocks.size();
    BlockPlan& b = plan.blocks.emplace_back();
    for (const auto& [key_handle, value] : item.cast<py::dict>()) {
      const std::string key = py::str(key_handle);
      if (key == "block") {
        b.block = BlockId(value.cast<int32_t>());
      } else if (key == "pruned_units") {
        b.pruned_units = value.cast<std::vector<int32_t>>();
      } else if (key == "offloads") {
        for (const auto& [owner, helper, units] :
             value.cast<std::vector<std::tuple<int32_t, int32_t, int32_t>>>()) {
          b.offloads.push_back({RankId(owner), RankId(helper), units});
        }
      } else if (key == "owner_of_unit") {
        for (int32_t r : value.cast<std::vector<int32_t>>()) b.owner_of_unit.push_back(RankId(r));
      } else if (key == "replicas") {
        b.replicas = ParseReplicas(value, absl::StrCat("blocks[", index, "].replicas"));
      } else if (key == "capacity_factor") {
        // A bool would cast to 0 or 1, a cap nobody meant; a str does not cast at all.
        if (py::isinstance<py::bool_>(value) ||
            !(py::isinstance<py::float_>(value) || py::isinstance<py::int_>(value))) {
          throw py::value_error(absl::StrCat("blocks[", index,
                                             "].capacity_factor must be a number, not ",
                                             py::repr(value).cast<std::string>()));
        }
        b.capacity_factor = value.cast<double>();
      } else {
        throw py::value_error(absl::StrCat(
            "unknown plan block key '", key,
            "' (block, pruned_units, offloads, owner_of_unit, replicas, capacity_factor)"));
      }
    }
  }
  return plan;
}

at::Tensor FloatTensor(const std::vector<float>& v) {
  at::Tensor t = at::empty({static_cast<int64_t>(v.size())}, at::kFloat);
  std::copy(v.begin(), v.end(), t.data_ptr<float>());
  return t;
}

std::vector<float> FloatVector(const at::Tensor& t, const char* name) {
  if (t.scalar_type() != at::kFloat || !t.device().is_cpu()) {
    throw py::value_error(absl::StrCat("checkpoint ", name, " must be a float32 CPU tensor"));
  }
  at::Tensor c = t.contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

py::dict CheckpointToDict(const BlockCheckpoint& c) {
  py::dict d;
  d["value"] = FloatTensor(c.value);
  d["adam_m"] = FloatTensor(c.adam_m);
  d["adam_v"] = FloatTensor(c.adam_v);
  at::Tensor steps = at::empty({static_cast<int64_t>(c.unit_steps.size())}, at::kLong);
  std::copy(c.unit_steps.begin(), c.unit_steps.end(), steps.data_ptr<int64_t>());
  d["unit_steps"] = steps;
  d["bias_step"] = c.bias_step;
  return d;
}

BlockCheckpoint CheckpointFromDict(const py::dict& d) {
  for (const char* key : {"value", "adam_m", "adam_v", "unit_steps", "bias_step"}) {
    if (!d.contains(key)) throw py::value_error(absl::StrCat("checkpoint has no '", key, "'"));
  }
  BlockCheckpoint c;
  c.value = FloatVector(d["value"].cast<at::Tensor>(), "value");
  c.adam_m = FloatVector(d["adam_m"].cast<at::Tensor>(), "adam_m");
  c.adam_v = FloatVector(d["adam_v"].cast<at::Tensor>(), "adam_v");
  at::Tensor steps = d["unit_steps"].cast<at::Tensor>().to(at::kLong).contiguous();
  c.unit_steps.assign(steps.data_ptr<int64_t>(), steps.data_ptr<int64_t>() + steps.numel());
  c.bias_step = d["bias_step"].cast<int64_t>();
  return c;
}

py::dict TimingsToDict(const StepTimings& t) {
  py::dict d;
  d["step"] = t.step;
  d["plan_version"] = t.plan_version.value();
  d["plan_number"] = t.plan_number;
  d["agreement_seconds"] = t.agreement_seconds;
  d["compute_seconds"] = t.compute_seconds();
  d["comm_seconds"] = t.comm_seconds();
  py::list blocks;
  for (const BlockTiming& b : t.blocks) {
    py::dict bd;
    bd["block"] = b.block.value();
    bd["compute_seconds"] = b.compute_seconds;
    bd["comm_seconds"] = b.comm_seconds;
    bd["units_computed"] = b.units_computed;
    bd["seconds_per_unit"] = b.seconds_per_unit;
    bd["micro_batches"] = b.micro_batches;
    // Mixture-of-experts blocks only (empty and 0 otherwise): the router's tokens per
    // expert per Forward, and the token rows this rank computed.
    bd["unit_tokens"] = b.unit_tokens;
    bd["tokens_computed"] = b.tokens_computed;
    blocks.append(bd);
  }
  d["blocks"] = blocks;
  return d;
}

std::vector<int32_t> RankValues(const std::vector<RankId>& ranks) {
  std::vector<int32_t> values;
  for (RankId r : ranks) values.push_back(r.value());
  return values;
}

// The inverse of ParsePlan's block dicts.
py::list PlanBlocksToList(const WorkloadPlan& plan) {
  py::list blocks;
  for (const BlockPlan& b : plan.blocks) {
    py::dict d;
    d["block"] = b.block.value();
    d["pruned_units"] = b.pruned_units;
    py::list offloads;
    for (const Offload& o : b.offloads) {
      offloads.append(py::make_tuple(o.owner.value(), o.helper.value(), o.units));
    }
    d["offloads"] = offloads;
    d["owner_of_unit"] = RankValues(b.owner_of_unit);
    py::list replicas;
    for (const Replica& r : b.replicas) {
      py::dict rd;
      rd["unit"] = r.unit;
      rd["helper"] = r.helper.value();
      rd["share"] = r.share;
      replicas.append(rd);
    }
    d["replicas"] = replicas;
    d["capacity_factor"] = b.capacity_factor;
    blocks.append(d);
  }
  return blocks;
}

}  // namespace
}  // namespace ballast::torch_adapter

// At global scope: the macro defines the module's extern "C" entry point.
PYBIND11_MODULE(_C, m) {
  using namespace ballast;                 // NOLINT(build/namespaces)
  using namespace ballast::torch_adapter;  // NOLINT(build/namespaces)
  m.doc() = "Ballast's C++ core for ballast.torch (use the ballast.torch package, not this)";

  py::class_<Session, std::shared_ptr<Session>>(m, "Session")
      .def(py::init([](const c10::intrusive_ptr<c10d::ProcessGroup>& process_group,
                       const std::string& group, int32_t plan_history, int blas_threads,
                       const std::string& collectives, const py::object& store,
                       double timeout_seconds, int cuda_device, bool nccl, uintptr_t cuda_stream,
                       const std::string& gemm_precision) {
             SessionOptions options{.group = group,
                                    .plan_history = plan_history,
                                    .blas_threads = blas_threads,
                                    .timeout = absl::Seconds(timeout_seconds),
                                    .cuda_device = cuda_device,
                                    .nccl = nccl,
                                    .cuda_stream = cuda_stream,
                                    .gemm_precision = ParsePrecision(gemm_precision)};
             if (!store.is_none()) options.store = store.cast<c10::intrusive_ptr<c10d::Store>>();
             if (collectives == "ballast") {
               options.collectives = Collectives::kBallast;
             } else if (collectives != "torch") {
               throw py::value_error(
                   absl::StrCat("collectives '", collectives, "' is not one of torch, ballast"));
             }
             return std::shared_ptr<Session>(Value(Released([&] {
               return Session::Create(process_group, options);  // the mesh connects: no GIL
             })));
           }),
           py::arg("process_group"), py::arg("group"), py::arg("plan_history") = 16,
           py::arg("blas_threads") = 0, py::arg("collectives") = "torch",
           py::arg("store") = py::none(), py::arg("timeout_seconds") = 60.0,
           py::arg("cuda_device") = -1, py::arg("nccl") = false, py::arg("cuda_stream") = 0,
           py::arg("gemm_precision") = "fp32")
      .def(
          "connect_agent",
          [](Session& s, const std::string& socket, const std::string& job,
             const std::string& device, const std::string& node) {
            AgentClientOptions options;
            options.socket_path = socket;
            options.job = job;
            options.device = device;
            options.node = node;
            Check(s.ConnectAgent(options));
          },
          py::arg("socket"), py::arg("job"), py::arg("device"), py::arg("node"))
      .def("begin_step", [](Session& s) { Check(Released([&] { return s.BeginStep(); })); })
      .def("end_step", [](Session& s) { Check(Released([&] { return s.EndStep(); })); })
      .def(
          "offer_plan",
          [](Session& s, int64_t version, const py::list& blocks, const std::string& imputation,
             const std::optional<std::string>& priority) {
            Check(s.group().OfferPlan(
                ParsePlan(s.group().group().value(), version, imputation, priority, blocks)));
          },
          py::arg("version"), py::arg("blocks"), py::arg("imputation") = "zero",
          py::arg("priority") = py::none())
      .def_property_readonly("rank", [](Session& s) { return s.group().rank().value(); })
      .def_property_readonly("size", [](Session& s) { return s.group().size(); })
      .def_property_readonly("group", [](Session& s) { return s.group().group().value(); })
      .def_property_readonly("step", [](Session& s) { return s.group().step(); })
      .def_property_readonly("in_step", &Session::in_step)
      .def_property_readonly("applied_version",
                             [](Session& s) { return s.group().applied_version().value(); })
      .def_property_readonly("applied_plan_number",
                             [](Session& s) { return s.group().applied_plan().number; })
      .def_property_readonly("applied_plan",
                             [](Session& s) { return PlanSummary(s.group().applied_plan()); })
      .def_property_readonly("applied_plan_blocks",
                             [](Session& s) { return PlanBlocksToList(s.group().applied_plan()); })
      .def_property_readonly("last_rejection",
                             [](Session& s) { return s.group().last_rejection().ToString(); })
      .def_property_readonly(
          "last_step_timings",
          [](Session& s) { return TimingsToDict(s.group().last_step_timings()); })
      .def_property_readonly("agent_stats", [](Session& s) -> py::object {
        if (s.agent() == nullptr) return py::none();
        const AgentClientStats st = s.agent()->stats();
        py::dict d;
        d["reports_sent"] = st.reports_sent;
        d["reports_dropped"] = st.reports_dropped;
        d["plans_received"] = st.plans_received;
        d["plans_rejected"] = st.plans_rejected;
        d["connects"] = st.connects;
        d["connected"] = st.connected;
        return d;
      });

  py::class_<Block>(m, "Block")
      .def_static(
          "mlp",
          [](std::shared_ptr<Session> session, int32_t id, int32_t hidden, int32_t intermediate,
             int32_t unit_size, int64_t seed, const std::string& priority, int32_t priority_window,
             const std::vector<int32_t>& owner_of_unit, const std::string& activation,
             bool recompute, bool keep_gradients) {
            MlpConfig config;
            config.id = BlockId(id);
            config.hidden = hidden;
            config.intermediate = intermediate;
            config.unit_size = unit_size;
            config.activation = ParseActivation(activation);
            config.units = ParseUnits(seed, priority, priority_window, owner_of_unit, recompute,
                                      keep_gradients);
            return Value(Block::CreateMlp(std::move(session), config));
          },
          py::arg("session"), py::arg("id"), py::arg("hidden"), py::arg("intermediate"),
          py::arg("unit_size"), py::arg("seed"), py::arg("priority"), py::arg("priority_window"),
          py::arg("owner_of_unit"), py::arg("activation") = "gelu", py::arg("recompute") = false,
          py::arg("keep_gradients") = false)
      .def_static(
          "attention",
          [](std::shared_ptr<Session> session, int32_t id, int32_t hidden, int32_t num_heads,
             int32_t head_dim, int64_t seed, const std::string& priority, int32_t priority_window,
             const std::vector<int32_t>& owner_of_unit, int32_t num_query_groups, bool causal,
             bool rotary, float rotary_base, bool recompute, bool keep_gradients) {
            AttentionConfig config;
            config.id = BlockId(id);
            config.hidden = hidden;
            config.num_heads = num_heads;
            config.head_dim = head_dim;
            config.num_query_groups = num_query_groups;
            config.causal = causal;
            config.rotary = rotary;
            config.rotary_base = rotary_base;
            config.units = ParseUnits(seed, priority, priority_window, owner_of_unit, recompute,
                                      keep_gradients);
            return Value(Block::CreateAttention(std::move(session), config));
          },
          py::arg("session"), py::arg("id"), py::arg("hidden"), py::arg("num_heads"),
          py::arg("head_dim"), py::arg("seed"), py::arg("priority"), py::arg("priority_window"),
          py::arg("owner_of_unit"), py::arg("num_query_groups") = 0, py::arg("causal") = false,
          py::arg("rotary") = false, py::arg("rotary_base") = 10000.0f,
          py::arg("recompute") = false, py::arg("keep_gradients") = false)
      .def_static(
          "moe",
          [](std::shared_ptr<Session> session, int32_t id, int32_t hidden, int32_t ffn,
             int32_t num_experts, int32_t top_k, bool pre_softmax, float aux_loss_coeff,
             int64_t seed, const std::string& priority, int32_t priority_window,
             const std::vector<int32_t>& owner_of_unit, bool recompute, bool keep_gradients) {
            MoeConfig config;
            config.id = BlockId(id);
            config.hidden = hidden;
            config.ffn = ffn;
            config.num_experts = num_experts;
            config.top_k = top_k;
            config.pre_softmax = pre_softmax;
            config.aux_loss_coeff = aux_loss_coeff;
            config.units = ParseUnits(seed, priority, priority_window, owner_of_unit, recompute,
                                      keep_gradients);
            return Value(Block::CreateMoe(std::move(session), config));
          },
          py::arg("session"), py::arg("id"), py::arg("hidden"), py::arg("ffn"),
          py::arg("num_experts"), py::arg("top_k"), py::arg("pre_softmax"),
          py::arg("aux_loss_coeff"), py::arg("seed"), py::arg("priority"),
          py::arg("priority_window"), py::arg("owner_of_unit"), py::arg("recompute") = false,
          py::arg("keep_gradients") = false)
      // MoE only. A block of another kind has no aux loss (0.0) and no experts ([]); setting
      // its aux-loss scale is refused (ValueError), since it could only be a mistake.
      .def_property_readonly("aux_loss",
                             [](Block& b) { return b.moe() ? b.moe()->aux_loss() : 0.0; })
      .def_property_readonly(
          "expert_tokens",
          [](Block& b) { return b.moe() ? b.moe()->expert_tokens() : std::vector<int32_t>(); })
      .def_property_readonly(
          "dropped_tokens",
          [](Block& b) { return b.moe() ? b.moe()->dropped_tokens() : int64_t{0}; })
      .def(
          "set_aux_loss_scale",
          [](Block& b, float scale) {
            if (b.moe() == nullptr) {
              throw py::value_error(absl::StrCat("block ", b.block().id().value(),
                                                 ": set_aux_loss_scale on a block that is not "
                                                 "a mixture of experts"));
            }
            b.moe()->set_aux_loss_scale(scale);
          },
          py::arg("scale"))
      .def(
          "forward",
          [](Block& b, const at::Tensor& x, int32_t batch, int32_t seq, const at::Tensor& y,
             bool add_output_bias) {
            Check(Released([&] { return b.Forward(x, batch, seq, y, add_output_bias); }));
          },
          py::arg("x"), py::arg("batch"), py::arg("seq"), py::arg("y"),
          py::arg("add_output_bias") = true)
      .def("backward",
           [](Block& b, const at::Tensor& dy, const at::Tensor& dx) {
             Check(Released([&] { return b.Backward(dy, dx); }));
           })
      .def(
          "adamw_step",
          [](Block& b, float lr, float beta1, float beta2, float eps, float weight_decay) {
            Check(Released([&] {
              return b.block().AdamWStep({.lr = lr,
                                          .beta1 = beta1,
                                          .beta2 = beta2,
                                          .eps = eps,
                                          .weight_decay = weight_decay});
            }));
          },
          py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"),
          py::arg("weight_decay"))
      .def_property_readonly("has_gradients", [](Block& b) { return b.block().has_gradients(); })
      .def("discard_gradients", [](Block& b) { b.block().DiscardGradients(); })
      .def_property_readonly("activation_bytes",
                             [](Block& b) { return b.block().activation_bytes(); })
      .def("grad_squared_norm",
           [](Block& b) { return Value(Released([&] { return b.block().GradSquaredNorm(); })); })
      .def("scale_gradients", [](Block& b, float alpha) { Check(b.block().ScaleGradients(alpha)); })
      .def(
          "gather_dense",
          [](Block& b, const std::string& field) {
            const ParamField f = ParseField(field);
            return FloatTensor(Value(Released([&] { return b.block().GatherDense(f); })));
          },
          py::arg("field") = "value")
      .def("load_dense", [](Block& b, const at::Tensor& dense) { Check(b.LoadDense(dense)); })
      .def("save_checkpoint",
           [](Block& b) {
             return CheckpointToDict(Value(Released([&] { return b.block().SaveCheckpoint(); })));
           })
      .def("restore_checkpoint",
           [](Block& b, const py::dict& d) {
             const BlockCheckpoint c = CheckpointFromDict(d);
             Check(Released([&] { return b.block().RestoreCheckpoint(c); }));
           })
      .def("output_bias", [](Block& b) { return FloatTensor(b.block().OutputBias()); })
      .def_property_readonly("id", [](Block& b) { return b.block().id().value(); })
      .def_property_readonly("num_units", [](Block& b) { return b.block().num_units(); })
      .def_property_readonly("hidden", [](Block& b) { return b.block().hidden(); })
      .def_property_readonly("dense_size", [](Block& b) { return b.block().dense_size(); })
      .def_property_readonly("unit_bytes", [](Block& b) { return b.block().unit_bytes(); })
      .def_property_readonly("owner_of_unit",
                             [](Block& b) { return RankValues(b.block().owner_of_unit()); })
      .def_property_readonly("local_units", [](Block& b) { return b.block().LocalUnits(); })
      .def_property_readonly("local_fates", [](Block& b) {
        std::vector<std::string> fates;
        for (UnitFate f : b.block().LocalFates()) fates.emplace_back(UnitFateName(f));
        return fates;
      });

  // Clipping's norm over many layers: one collective for all of them.
  m.def("group_grad_squared_norm", [](const std::vector<Block*>& blocks) {
    std::vector<ParallelBlock*> parallel;
    for (Block* b : blocks) {
      if (b == nullptr) throw py::value_error("group_grad_squared_norm: a block is None");
      parallel.push_back(&b->block());
    }
    return Value(Released([&] { return GroupGradSquaredNorm(parallel); }));
  });
}
