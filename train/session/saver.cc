// train::Saver and train::latest_checkpoint (include/actorflow/saver.h; library
// af_train_session): the Supervisor's session path (actors/variable_checkpoint.h) over the
// checkpoint files of data/checkpoint.h.
#include "actorflow/saver.h"

#include <mutex>

#include "actors/session.h"
#include "actors/variable_checkpoint.h"
#include "data/checkpoint.h"
#include "data/tf/tf_checkpoint_data.h"
#include "train/collections.h"

namespace actorflow {
namespace train {
namespace {

// "<dir>/<prefix>" -> {dir, prefix}; dir "." without a slash.
Result<std::pair<std::string, std::string>> split_save_path(const std::string& save_path) {
  const size_t slash = save_path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : save_path.substr(0, slash));
  std::string prefix = slash == std::string::npos ? save_path : save_path.substr(slash + 1);
  if (prefix.empty() || prefix == "." || prefix == "..")
    return InvalidArgument("Saver.save: save_path '" + save_path +
                           "' has no file name prefix (give e.g. '" + save_path +
                           (save_path.empty() || save_path.back() == '/' ? "" : "/") + "model.ckpt')");
  return std::make_pair(std::move(dir), std::move(prefix));
}

}  // namespace

class Saver::Impl {
 public:
  Impl(const Scope& s, const std::vector<Output>& var_list, SaverOptions opts)
      : opts_(std::move(opts)),
        io_(s, var_list.empty() ? graph_variables(*s.graph(), "", false) : var_list, opts_.name) {}

  Result<std::string> save(Session& sess, const std::string& save_path, const Output& step_op, int64_t step) {
    AF_RETURN_IF_ERROR(io_.status().with_prefix("Saver"));
    AF_ASSIGN_OR_RETURN(auto where, split_save_path(save_path));
    std::lock_guard<std::mutex> l(mu_);
    auto data = io_.read(sess, step_op);
    if (!data.ok()) return data.status().with_prefix("Saver.save: reading the variables");
    if (!step_op.valid()) data->global_step = step;
    if (data->global_step < 0)
      return InvalidArgument("Saver.save: negative global step " + std::to_string(data->global_step));
    CheckpointManager manager(where.first, opts_.max_to_keep, where.second,
                              opts_.tensorflow_format ? CheckpointFormat::kTensorFlow : CheckpointFormat::kActorflow);
    manager.set_tensorflow_sharded(opts_.sharded);
    return manager.save(*data);
  }

  Status restore(Session& sess, const std::string& path) {
    AF_RETURN_IF_ERROR(io_.status().with_prefix("Saver"));
    std::lock_guard<std::mutex> l(mu_);
    auto data = read_any_checkpoint(path);
    if (!data.ok()) return data.status().with_prefix("Saver.restore");
    return io_.assign(sess, *data, path, /*allow_missing=*/false).with_prefix("Saver.restore");
  }

  SaverOptions opts_;
  VariableCheckpointOps io_;
  std::mutex mu_;
};

Saver::Saver(const Scope& s, const std::vector<Output>& var_list, SaverOptions opts)
    : impl_(std::make_unique<Impl>(s, var_list, std::move(opts))) {}
Saver::~Saver() = default;
Saver::Saver(Saver&&) noexcept = default;
Saver& Saver::operator=(Saver&&) noexcept = default;

Status Saver::status() const { return impl_->io_.status(); }

const std::vector<Output>& Saver::var_list() const { return impl_->io_.variables(); }

Result<std::string> Saver::save(Session& sess, const std::string& save_path, int64_t global_step) {
  return impl_->save(sess, save_path, Output(), global_step);
}

Result<std::string> Saver::save(Session& sess, const std::string& save_path, const Output& global_step) {
  if (!global_step.valid()) return InvalidArgument("Saver.save: global_step is an invalid Output");
  return impl_->save(sess, save_path, global_step, 0);
}

Status Saver::restore(Session& sess, const std::string& path) { return impl_->restore(sess, path); }

Result<std::string> latest_checkpoint(const std::string& dir, const std::string& prefix) {
  CheckpointManager manager(dir, 0, prefix);
  AF_ASSIGN_OR_RETURN(auto data, manager.restore_latest());
  if (!data) return NotFound("no checkpoint " + prefix + "-<step> in " + dir);
  return manager.last_restored_path();
}

}  // namespace train
}  // namespace actorflow
