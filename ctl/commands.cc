#include "ctl/commands.h"

#include <google/protobuf/util/json_util.h>

#include <functional>
#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "coordinator/policy_proto.h"

namespace ballast::ctl {
namespace {

constexpr int kOk = 0;
constexpr int kFailed = 1;
constexpr int kUsage = 2;

constexpr char kUsageText[] =
    "usage: ballastctl [--coordinator=HOST:PORT] [--json] [--preconfigure] [--tls_ca=CA]\n"
    "                  [--tls_cert=CRT --tls_key=KEY] [--token_file=FILE] COMMAND\n"
    "  status [JOB]\n"
    "  policy get JOB\n"
    "  policy set JOB KEY=VALUE...   keys: mode, max_pruned_fraction_rank,\n"
    "      max_pruned_fraction_group, imputation, priority, accuracy_weight_seconds,\n"
    "      straggler_threshold, hysteresis, reshard_after_ms, report_period_ms,\n"
    "      expert_capacity_factor (0: no cap)\n"
    "  pause [JOB] | resume [JOB]\n"
    "  cordon DEVICE [REASON...] | uncordon DEVICE\n"
    "  explain JOB GROUP\n"
    "  hold JOB GROUP RANK [offload=F] [reshard=F] | release JOB GROUP\n"
    "      hold a group at a fixed plan: RANK's units resharded and offloaded by\n"
    "      fractions of its even share (0..1), until released\n";

int Usage(std::ostream& err, const std::string& problem) {
  err << "ballastctl: " << problem << "\n" << kUsageText;
  return kUsage;
}

int Failed(std::ostream& err, const absl::Status& status) {
  err << "ballastctl: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
      << "\n";
  return kFailed;
}

void PrintJson(const google::protobuf::Message& message, std::ostream& out) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  out << json;
}

void PrintPolicy(const v1::Policy& p, std::ostream& out) {
  out << absl::StrFormat(
      "mode                       %s\n"
      "max_pruned_fraction_rank   %g\n"
      "max_pruned_fraction_group  %g\n"
      "imputation                 %s\n"
      "priority                   %s\n"
      "accuracy_weight_seconds    %g\n"
      "straggler_threshold        %g\n"
      "hysteresis                 %g\n"
      "reshard_after_ms           %d\n"
      "report_period_ms           %d\n"
      "expert_capacity_factor     %g\n",
      p.mode(), p.max_pruned_fraction_rank(), p.max_pruned_fraction_group(), p.imputation(),
      p.priority(), p.accuracy_weight_seconds(), p.straggler_threshold(), p.hysteresis(),
      p.reshard_after_ms(), p.report_period_ms(), p.expert_capacity_factor());
}

void PrintStatus(const v1::ClusterStatus& s, std::ostream& out) {
  out << absl::StrFormat("agents %d  workers %d  balancing %s", s.agents(), s.workers(),
                         s.paused() ? "PAUSED" : "on");
  if (s.cordoned_devices_size() > 0) {
    out << "  cordoned " << absl::StrJoin(s.cordoned_devices(), ",");
  }
  out << "\n";
  for (const v1::JobStatus& job : s.jobs()) {
    out << absl::StrFormat("\njob %s  mode %s%s\n", job.job(), job.policy().mode(),
                           job.paused() ? "  PAUSED" : "");
    for (const v1::GroupStatus& g : job.groups()) {
      out << absl::StrFormat(
          "  group %s  size %d  plan %s\n    pruned %.1f%%  offloaded %.1f%%  predicted %.4fs "
          "(%.4fs collectives)  measured %.4fs\n",
          g.group(), g.size(), g.plan_summary(), 100 * g.pruned_fraction(),
          100 * g.offloaded_fraction(), g.predicted_step_seconds(),
          g.predicted_collective_seconds(), g.measured_step_seconds());
      if (g.has_hold()) {
        out << absl::StrFormat(
            "    HELD at rank %d: offload %g%%, reshard %g%% (ballastctl release %s %s)\n",
            g.hold().rank(), 100 * g.hold().offload_fraction(), 100 * g.hold().reshard_fraction(),
            job.job(), g.group());
      }
      if (g.link_bytes_per_second() > 0) {  // an older coordinator does not say
        out << absl::StrFormat("    link %.4g MB/s (%s)\n", g.link_bytes_per_second() / 1e6,
                               !g.link_learned()        ? "prior"
                               : g.link_basis().empty() ? "learned"  // an older coordinator
                                                        : g.link_basis());
      }
      out << absl::StrFormat("    %-5s %-24s %-16s %-14s %s\n", "RANK", "DEVICE", "NODE", "S/UNIT",
                             "STATE");
      for (const v1::RankStatus& r : g.ranks()) {
        out << absl::StrFormat("    %-5d %-24s %-16s %-14.6g %s\n", r.rank(), r.device(), r.node(),
                               r.seconds_per_unit(), r.state());
      }
    }
  }
}

// Applies KEY=VALUE assignments to a policy; the error names the key.
absl::Status ApplyAssignments(const std::vector<std::string>& assignments, v1::Policy& p) {
  using Setter = std::function<bool(absl::string_view)>;
  auto number = [](double* field) {
    return Setter([field](absl::string_view v) { return absl::SimpleAtod(v, field); });
  };
  auto integer = [](int64_t* field) {
    return Setter([field](absl::string_view v) { return absl::SimpleAtoi(v, field); });
  };
  auto text = [](std::string* field) {
    return Setter([field](absl::string_view v) {
      *field = std::string(v);
      return !v.empty();
    });
  };
  double rank_f = p.max_pruned_fraction_rank(), group_f = p.max_pruned_fraction_group(),
         weight = p.accuracy_weight_seconds(), threshold = p.straggler_threshold(),
         hysteresis = p.hysteresis(), capacity = p.expert_capacity_factor();
  int64_t reshard = p.reshard_after_ms(), period = p.report_period_ms();
  std::string mode = p.mode(), imputation = p.imputation(), priority = p.priority();
  const std::map<std::string, Setter> setters = {
      {"mode", text(&mode)},
      {"max_pruned_fraction_rank", number(&rank_f)},
      {"max_pruned_fraction_group", number(&group_f)},
      {"imputation", text(&imputation)},
      {"priority", text(&priority)},
      {"accuracy_weight_seconds", number(&weight)},
      {"straggler_threshold", number(&threshold)},
      {"hysteresis", number(&hysteresis)},
      {"reshard_after_ms", integer(&reshard)},
      {"report_period_ms", integer(&period)},
      {"expert_capacity_factor", number(&capacity)},
  };
  std::set<std::string> seen;
  for (const std::string& a : assignments) {
    std::pair<std::string, std::string> kv = absl::StrSplit(a, absl::MaxSplits('=', 1));
    auto it = setters.find(kv.first);
    if (a.find('=') == std::string::npos || it == setters.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", a, "' is not KEY=VALUE with a known key"));
    }
    if (!seen.insert(kv.first).second) {  // which one would win is not for us to guess
      return absl::InvalidArgumentError(absl::StrCat("key ", kv.first, " given twice"));
    }
    if (!it->second(kv.second)) {
      return absl::InvalidArgumentError(
          absl::StrCat("value '", kv.second, "' of ", kv.first, " is not valid"));
    }
  }
  p.set_mode(mode);
  p.set_imputation(imputation);
  p.set_priority(priority);
  p.set_max_pruned_fraction_rank(rank_f);
  p.set_max_pruned_fraction_group(group_f);
  p.set_accuracy_weight_seconds(weight);
  p.set_straggler_threshold(threshold);
  p.set_hysteresis(hysteresis);
  p.set_reshard_after_ms(reshard);
  p.set_report_period_ms(period);
  p.set_expert_capacity_factor(capacity);
  return absl::OkStatus();
}

// Parses hold's RANK [offload=F] [reshard=F]; the error names what is wrong. The ranges
// are the coordinator's to check (it knows the group's size).
absl::Status ParseHold(const std::vector<std::string>& args, v1::Hold& hold) {
  int32_t rank = 0;
  if (!absl::SimpleAtoi(args[0], &rank)) {
    return absl::InvalidArgumentError("hold: RANK '" + args[0] + "' is not an integer");
  }
  hold.set_rank(rank);
  std::set<std::string> seen;
  for (size_t i = 1; i < args.size(); ++i) {
    std::pair<std::string, std::string> kv = absl::StrSplit(args[i], absl::MaxSplits('=', 1));
    double value = 0;
    if ((kv.first != "offload" && kv.first != "reshard") || !seen.insert(kv.first).second) {
      return absl::InvalidArgumentError("hold: '" + args[i] +
                                        "' is not offload=F or reshard=F (each at most once)");
    }
    if (!absl::SimpleAtod(kv.second, &value)) {
      return absl::InvalidArgumentError("hold: " + kv.first + " '" + kv.second +
                                        "' is not a number");
    }
    kv.first == "offload" ? hold.set_offload_fraction(value) : hold.set_reshard_fraction(value);
  }
  return absl::OkStatus();
}

}  // namespace

int RunCommand(const std::vector<std::string>& args, const CommandFlags& flags, AdminClient& client,
               std::ostream& out, std::ostream& err) {
  const bool json = flags.json;
  if (args.empty()) return Usage(err, "no command");
  const std::string& cmd = args[0];
  const size_t n = args.size();

  if (cmd == "status") {
    if (n > 2) return Usage(err, "status takes at most one JOB");
    v1::GetStatusRequest request;
    if (n == 2) request.set_job(args[1]);
    absl::StatusOr<v1::ClusterStatus> status = client.GetStatus(request);
    if (!status.ok()) return Failed(err, status.status());
    json ? PrintJson(*status, out) : PrintStatus(*status, out);
    return kOk;
  }
  if (cmd == "policy") {
    if (n < 3 || (args[1] != "get" && args[1] != "set")) {
      return Usage(err, "policy needs 'get JOB' or 'set JOB KEY=VALUE...'");
    }
    v1::GetPolicyRequest get;
    get.set_job(args[2]);
    absl::StatusOr<v1::Policy> policy = client.GetPolicy(get);
    // A job that has not started yet may be configured ahead, when the operator says
    // so: start from the defaults.
    if (args[1] == "set" && flags.preconfigure &&
        policy.status().code() == absl::StatusCode::kNotFound) {
      policy = coordinator::PolicyToProto(coordinator::JobPolicy{});
    }
    if (!policy.ok()) return Failed(err, policy.status());
    if (args[1] == "get") {
      if (n != 3) return Usage(err, "policy get takes one JOB");
      json ? PrintJson(*policy, out) : PrintPolicy(*policy, out);
      return kOk;
    }
    if (n < 4) return Usage(err, "policy set needs at least one KEY=VALUE");
    v1::SetPolicyRequest set;
    set.set_job(args[2]);
    set.set_preconfigure(flags.preconfigure);
    *set.mutable_policy() = *policy;
    if (absl::Status s = ApplyAssignments({args.begin() + 3, args.end()}, *set.mutable_policy());
        !s.ok()) {
      return Usage(err, std::string(s.message()));
    }
    absl::StatusOr<v1::Policy> stored = client.SetPolicy(set);
    if (!stored.ok()) return Failed(err, stored.status());
    json ? PrintJson(*stored, out) : PrintPolicy(*stored, out);
    return kOk;
  }
  if (cmd == "pause" || cmd == "resume") {
    if (n > 2) return Usage(err, cmd + " takes at most one JOB");
    v1::SetPausedRequest request;
    if (n == 2) request.set_job(args[1]);
    request.set_paused(cmd == "pause");
    request.set_preconfigure(flags.preconfigure);
    if (absl::Status s = client.SetPaused(request); !s.ok()) return Failed(err, s);
    out << (cmd == "pause" ? "paused" : "resumed") << " balancing for "
        << (n == 2 ? "job " + args[1] : std::string("the cluster")) << "\n";
    return kOk;
  }
  if (cmd == "cordon" || cmd == "uncordon") {
    if (n < 2 || (cmd == "uncordon" && n != 2)) return Usage(err, cmd + " needs one DEVICE");
    v1::SetCordonRequest request;
    request.set_device(args[1]);
    request.set_cordoned(cmd == "cordon");
    request.set_reason(absl::StrJoin(args.begin() + 2, args.end(), " "));
    if (absl::Status s = client.SetCordon(request); !s.ok()) return Failed(err, s);
    out << cmd << "ed " << args[1] << "\n";
    return kOk;
  }
  if (cmd == "explain") {
    if (n != 3) return Usage(err, "explain needs JOB GROUP");
    v1::ExplainRequest request;
    request.set_job(args[1]);
    request.set_group(args[2]);
    absl::StatusOr<v1::Explanation> e = client.Explain(request);
    if (!e.ok()) return Failed(err, e.status());
    if (json) {
      PrintJson(*e, out);
    } else {
      out << "job " << e->job() << " group " << e->group() << " plan #" << e->plan_number()
          << " (version " << e->plan_version() << ")\n"
          << e->text() << "\n";
    }
    return kOk;
  }
  if (cmd == "hold" || cmd == "release") {
    if (cmd == "hold" ? n < 4 : n != 3) {
      return Usage(err, cmd == "hold" ? "hold needs JOB GROUP RANK [offload=F] [reshard=F]"
                                      : "release needs JOB GROUP");
    }
    v1::SetHoldRequest request;
    request.set_job(args[1]);
    request.set_group(args[2]);
    request.set_release(cmd == "release");
    if (cmd == "hold") {
      if (absl::Status s = ParseHold({args.begin() + 3, args.end()}, *request.mutable_hold());
          !s.ok()) {
        return Usage(err, std::string(s.message()));
      }
    }
    if (absl::Status s = client.SetHold(request); !s.ok()) return Failed(err, s);
    if (cmd == "hold") {
      out << absl::StrFormat("held job %s group %s at rank %d: offload %g%%, reshard %g%%\n",
                             args[1], args[2], request.hold().rank(),
                             100 * request.hold().offload_fraction(),
                             100 * request.hold().reshard_fraction());
    } else {
      out << "released job " << args[1] << " group " << args[2] << "\n";
    }
    return kOk;
  }
  return Usage(err, "unknown command '" + cmd + "'");
}

}  // namespace ballast::ctl
