// Fault injection, all of it: includes the pieces, so that the runtime's hook sites need one
// include.
//   config/fault_plan.h     the plan format (FaultKind, Fault, FaultPlan: parse, from_file,
//                           to_toml), validation (check_fault, check_plan_tasks), limits and the
//                           seed-derived streams (FaultRng). CAF-free.
//   config/task_names.h     task-name helpers (task_of_device, short_task_name, canonical_task,
//                           is_global_step_name).
//   actors/fault_injector.h the process-wide FaultInjector, its hooks and what they decide
//                           (LinkDecision, InjectedFault, FaultStats).
// docs/reliability.md, "Fault injection", describes plans and where each fault acts.
#pragma once

#include "actors/fault_injector.h"
#include "config/fault_plan.h"
#include "config/task_names.h"
