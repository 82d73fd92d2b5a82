// ballastctl's commands, apart from flag parsing and the network so they are testable
// with a fake client:
//
//   status [JOB]                     cluster / job status
//   policy get JOB                   a job's balancing policy
//   policy set JOB KEY=VALUE...      change fields of it (mode=migrate hysteresis=0.1 ...)
//   pause [JOB] | resume [JOB]       stop / restart balancing (cluster-wide without JOB)
//   cordon DEVICE [REASON...] | uncordon DEVICE
//   explain JOB GROUP                the last decision for a group
//   hold JOB GROUP RANK [offload=F] [reshard=F] | release JOB GROUP
//                                    hold a group at a fixed plan (held_plan.h)
//
// Output is a readable table, or JSON with `json` set. `policy set`, `pause JOB` and
// `resume JOB` on a job the coordinator does not know fail (NOT_FOUND, exit 1) unless
// `preconfigure` is set; `uncordon` of a device that is not cordoned fails too. Returns
// the process exit code: 0 success, 1 the call failed, 2 a usage error.
#ifndef BALLAST_CTL_COMMANDS_H_
#define BALLAST_CTL_COMMANDS_H_

#include <ostream>
#include <string>
#include <vector>

#include "ctl/admin_client.h"

namespace ballast::ctl {

struct CommandFlags {
  bool json = false;          // --json
  bool preconfigure = false;  // --preconfigure
};

int RunCommand(const std::vector<std::string>& args, const CommandFlags& flags, AdminClient& client,
               std::ostream& out, std::ostream& err);

}  // namespace ballast::ctl

#endif  // BALLAST_CTL_COMMANDS_H_
