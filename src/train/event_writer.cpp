#include "voxfit/train/event_writer.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>

#include "voxfit/core/error.h"

namespace voxfit::train {

namespace {

const std::array<std::uint32_t, 256>& crc_table() {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

std::uint32_t masked_crc(const void* data, std::size_t size) {
  const std::uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

template <typename T>
void put_fixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian host (x86-64, aarch64)
  out.append(b, sizeof(T));
}

void put_bytes_field(std::string& out, int field, const std::string& bytes) {
  put_varint(out, static_cast<std::uint64_t>(field) << 3 | 2);
  put_varint(out, bytes.size());
  out += bytes;
}

// Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
std::string event_header(int64_t step) {
  std::string e;
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  put_varint(e, 1 << 3 | 1);
  put_fixed(e, now);
  put_varint(e, 2 << 3 | 0);
  put_varint(e, static_cast<std::uint64_t>(step));
  return e;
}

struct Reader {
  const std::string& s;
  std::size_t pos = 0;
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; pos < s.size() && shift < 64; shift += 7) {
      const auto b = static_cast<unsigned char>(s[pos++]);
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    throw IoError("truncated varint");
  }
  std::string bytes() {
    const auto n = varint();
    if (n > s.size() - pos) throw IoError("truncated field");
    std::string out = s.substr(pos, n);
    pos += n;
    return out;
  }
  void skip(int wire) {
    if (wire == 0)
      varint();
    else if (wire == 1)
      pos += 8;
    else if (wire == 2)
      bytes();
    else if (wire == 5)
      pos += 4;
    else
      throw IoError("unknown wire type");
    if (pos > s.size()) throw IoError("truncated field");
  }
};

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size) {
  const auto& t = crc_table();
  std::uint32_t c = 0xFFFFFFFFu;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) c = t[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

EventWriter::EventWriter(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  const auto secs =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  path_ = dir / ("events.out.tfevents." + std::to_string(secs) + "." + host + ".voxfit");
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) throw IoError(path_.string() + ": cannot create the TensorBoard event file");
  std::string e = event_header(0);
  put_bytes_field(e, 3, "brain.Event:2");
  write_record(e);
  flush();
}

EventWriter::~EventWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void EventWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  // Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
  std::string v;
  put_bytes_field(v, 1, tag);
  put_varint(v, 2 << 3 | 5);
  put_fixed(v, static_cast<float>(value));
  std::string summary;
  put_bytes_field(summary, 1, v);
  std::string e = event_header(step);
  put_bytes_field(e, 5, summary);
  write_record(e);
}

void EventWriter::write_record(const std::string& payload) {
  std::string rec;
  const std::uint64_t len = payload.size();
  put_fixed(rec, len);
  put_fixed(rec, masked_crc(&len, sizeof len));
  rec += payload;
  put_fixed(rec, masked_crc(payload.data(), payload.size()));
  if (std::fwrite(rec.data(), 1, rec.size(), file_) != rec.size())
    throw IoError(path_.string() + ": write failed (disk full?)");
}

void EventWriter::flush() {
  if (std::fflush(file_) != 0) throw IoError(path_.string() + ": write failed (disk full?)");
}

std::vector<ScalarEvent> read_scalar_events(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw IoError(file.string() + ": cannot open");
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<ScalarEvent> out;
  std::size_t pos = 0;
  const auto fail = [&](const std::string& why) {
    return IoError(file.string() + ": " + why + " at byte " + std::to_string(pos));
  };
  while (pos < data.size()) {
    if (data.size() - pos < 12) throw fail("truncated record header");
    std::uint64_t len;
    std::uint32_t len_crc;
    std::memcpy(&len, data.data() + pos, 8);
    std::memcpy(&len_crc, data.data() + pos + 8, 4);
    if (len_crc != masked_crc(&len, 8)) throw fail("bad length CRC");
    if (len > data.size() - pos - 16) throw fail("truncated record");
    const std::string payload = data.substr(pos + 12, len);
    std::uint32_t crc;
    std::memcpy(&crc, data.data() + pos + 12 + len, 4);
    if (crc != masked_crc(payload.data(), payload.size())) throw fail("bad data CRC");
    pos += 16 + len;
    Reader ev{payload};
    int64_t step = 0;
    std::string summary;
    while (ev.pos < payload.size()) {
      const auto key = ev.varint();
      if (key == (2 << 3 | 0))
        step = static_cast<int64_t>(ev.varint());
      else if (key == (5 << 3 | 2))
        summary = ev.bytes();
      else
        ev.skip(static_cast<int>(key & 7));
    }
    Reader sm{summary};
    while (sm.pos < summary.size()) {
      const auto key = sm.varint();
      if (key != (1 << 3 | 2)) {
        sm.skip(static_cast<int>(key & 7));
        continue;
      }
      const std::string value = sm.bytes();
      Reader v{value};
      ScalarEvent se;
      se.step = step;
      while (v.pos < value.size()) {
        const auto k = v.varint();
        if (k == (1 << 3 | 2))
          se.tag = v.bytes();
        else if (k == (2 << 3 | 5)) {
          std::memcpy(&se.value, value.data() + v.pos, 4);
          v.pos += 4;
        } else
          v.skip(static_cast<int>(k & 7));
      }
      out.push_back(se);
    }
  }
  return out;
}

}  // namespace voxfit::train
