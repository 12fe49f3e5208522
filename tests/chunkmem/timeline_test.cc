// ChunkTimeline writes a Chrome trace that parses as JSON, with copies as complete
// ("X") events, moments as instants and the bytes per tier as counters.
#include <fstream>
#include <nlohmann/json.hpp>

#include "chunkmem/timeline.h"
#include "tests/catch.h"

namespace ps::chunkmem {
namespace {

TEST_CASE("the Chrome trace parses and holds every event", "[timeline]") {
  ChunkTimeline t;
  t.Moment("forward 1");
  const int64_t start = t.NowUs();
  t.Copy("fetch", 3, 4096, start);
  t.Bytes(4096, 8192);
  t.Copy("evict", 1, 2048, t.NowUs());
  REQUIRE(t.num_events() == 4);
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir ? dir : "/tmp") + "/trace.json";
  t.WriteChromeTrace(path);
  const auto trace = nlohmann::json::parse(std::ifstream(path));
  const auto& events = trace.at("traceEvents");
  REQUIRE(events.size() == 5);  // + process name metadata
  CHECK(events[1]["ph"] == "i");
  CHECK(events[1]["name"] == "forward 1");
  CHECK(events[2]["ph"] == "X");
  CHECK(events[2]["name"] == "fetch chunk 3");
  CHECK(events[2]["args"]["bytes"] == 4096);
  CHECK(events[2]["dur"].get<int64_t>() >= 1);
  CHECK(events[3]["ph"] == "C");
  CHECK(events[3]["args"]["device"] == 4096);
  CHECK(events[3]["args"]["host"] == 8192);
  CHECK(events[4]["cat"] == "evict");
  CHECK(events[4]["tid"] == 2);
  for (size_t i = 2; i < events.size(); ++i) CHECK(events[i]["ts"] >= events[i - 1].value("ts", 0));
}

}  // namespace
}  // namespace ps::chunkmem
