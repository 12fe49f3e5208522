// Benchmark (not a test): tokenizer throughput. Encodes a UTF-8 text file once as a whole
// on one thread, then as documents (split at blank lines) on one thread, then the
// documents spread over --threads threads taking them in turn; reports the best of --iters runs in MB/s and
// tokens/s. The last line is one JSON object (read by tools/bench_tokenizer.py, which runs HF `tokenizers` on
// the same text and prints the ratios).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cxxopts.hpp>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double BestSeconds(int iters, F&& f) {
  f();  // warm-up
  double best = 1e30;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

std::vector<std::string> SplitDocuments(const std::string& text) {
  std::vector<std::string> docs;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find("\n\n", start);
    end = end == std::string::npos ? text.size() : end + 2;
    docs.push_back(text.substr(start, end - start));
    start = end;
  }
  return docs;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options options("bench_tokenizer", "tokenizer throughput, single- and multi-threaded");
  options.add_options()("tokenizer", "tokenizer.json, vocab file or folder", cxxopts::value<std::string>())(
      "text", "UTF-8 text file", cxxopts::value<std::string>())(
      "threads", "threads of the document run (0 = all cores)", cxxopts::value<int>()->default_value("0"))(
      "iters", "timed runs (best is reported)", cxxopts::value<int>()->default_value("3"))("h,help", "help");
  const auto args = options.parse(argc, argv);
  if (args.count("help") || !args.count("tokenizer") || !args.count("text")) {
    std::printf("%s\n", options.help().c_str());
    return args.count("help") ? 0 : 2;
  }
  int threads = args["threads"].as<int>();
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int iters = args["iters"].as<int>();

  std::ifstream in(args["text"].as<std::string>(), std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", args["text"].as<std::string>().c_str());
    return 2;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const std::vector<std::string> docs = SplitDocuments(text);
  const double mb = text.size() / 1e6;

  const auto load_t0 = Clock::now();
  const auto tok = ps::tokenizer::LoadTokenizer(args["tokenizer"].as<std::string>());
  const double load_s = std::chrono::duration<double>(Clock::now() - load_t0).count();

  size_t single_tokens = 0;
  const double single_s = BestSeconds(iters, [&] { single_tokens = tok->Encode(text).size(); });

  size_t docs_tokens = 0;
  const double docs_s = BestSeconds(iters, [&] {
    docs_tokens = 0;
    for (const std::string& doc : docs) docs_tokens += tok->Encode(doc).size();
  });

  std::atomic<size_t> multi_tokens{0};
  const double multi_s = BestSeconds(iters, [&] {
    std::atomic<size_t> next{0};
    multi_tokens = 0;
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&] {
        size_t count = 0;
        for (size_t i; (i = next.fetch_add(1)) < docs.size();) count += tok->Encode(docs[i]).size();
        multi_tokens += count;
      });
    }
    for (auto& th : pool) th.join();
  });

  std::printf("tokenizer %s (%s, %lld ids), loaded in %.3f s\n", args["tokenizer"].as<std::string>().c_str(),
              ps::tokenizer::ToString(tok->kind()), static_cast<long long>(tok->vocab_size()), load_s);
  std::printf("text %.2f MB, %zu documents\n", mb, docs.size());
  std::printf("single thread, whole text: %8.2f MB/s %12.0f tokens/s (%zu tokens)\n", mb / single_s,
              single_tokens / single_s, single_tokens);
  std::printf("single thread, documents:  %8.2f MB/s %12.0f tokens/s (%zu tokens)\n", mb / docs_s,
              docs_tokens / docs_s, docs_tokens);
  std::printf("%2d threads, documents:     %8.2f MB/s %12.0f tokens/s (%zu tokens)\n", threads, mb / multi_s,
              multi_tokens.load() / multi_s, multi_tokens.load());
  std::printf(
      "{\"bytes\": %zu, \"documents\": %zu, \"threads\": %d, \"single_s\": %.6f, \"single_tokens\": %zu, "
      "\"docs_s\": %.6f, \"docs_tokens\": %zu, \"multi_s\": %.6f, \"multi_tokens\": %zu}\n",
      text.size(), docs.size(), threads, single_s, single_tokens, docs_s, docs_tokens, multi_s,
      multi_tokens.load());
  return 0;
}
