#pragma once
// TensorBoard event files (scalars) without TensorFlow: TFRecord framing with masked CRC-32C around
// hand-encoded `Event` protocol buffers, which TensorBoard opens like PyTorch's SummaryWriter's.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace voxfit::train {

/// CRC-32C (Castagnoli), as TFRecord uses it.
std::uint32_t crc32c(const void* data, std::size_t size);

class EventWriter {
 public:
  /// Creates `dir`/events.out.tfevents.<seconds>.<host>.voxfit and writes the file-version event.
  explicit EventWriter(const std::filesystem::path& dir);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  void add_scalar(const std::string& tag, double value, int64_t step);
  void flush();
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& payload);
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

struct ScalarEvent {
  std::string tag;
  float value = 0;
  int64_t step = 0;
};

/// Reads the scalars back, checking every record's CRCs; throws IoError naming the file otherwise.
std::vector<ScalarEvent> read_scalar_events(const std::filesystem::path& file);

}  // namespace voxfit::train
