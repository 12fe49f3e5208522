#include "tools/chat_session.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "tokenizer/utf8.h"
#include "tools/text_stream.h"

namespace ps::tools {
namespace {

chat::Value Message(const std::string& role, const std::string& content) {
  return chat::Value::MakeDict({{"role", chat::Value::String(role)}, {"content", chat::Value::String(content)}});
}

}  // namespace

ChatSession::ChatSession(const prep::ChatSetup& setup, const tokenizer::Tokenizer& tok, const std::string& system)
    : setup_(setup), tok_(tok) {
  if (!system.empty()) messages_.push_back(Message("system", system));
}

std::vector<int32_t> ChatSession::PromptAfterUserTurn(const std::string& text) {
  const size_t bad = tokenizer::FindInvalidUtf8(text);
  if (bad != std::string::npos) {
    throw std::invalid_argument("the line is not valid UTF-8 (byte " + std::to_string(bad + 1) + ")");
  }
  chat::List messages = messages_;
  messages.push_back(Message("user", text));
  chat::Dict context = setup_.variables;
  for (auto& [k, v] : context) {
    if (k == "add_generation_prompt") v = chat::Value::Bool(true);
  }
  context.emplace_back("messages", chat::Value::MakeList(messages));
  std::string rendered;
  try {
    rendered = setup_.tmpl->Render(chat::Value::MakeDict(std::move(context))).text;
  } catch (const chat::TemplateError& e) {
    throw std::invalid_argument(setup_.template_origin + ": " + e.what());
  }
  std::vector<int32_t> ids = tok_.Encode(rendered);  // before the turn joins the history
  messages_ = std::move(messages);
  return ids;
}

std::string ChatSession::AddReply(std::vector<int32_t> ids) {
  if (!ids.empty() && setup_.end_of_turn_ids.count(ids.back())) ids.pop_back();
  std::string text = tok_.Decode(ids);
  messages_.push_back(Message("assistant", text));
  return text;
}

void PrintIds(std::ostream& out, const std::vector<int64_t>& ids) {
  for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
  out << "\n";
}

namespace {

// One reply to `prompt`, streamed to io.out (without its stop token); returns its ids.
std::vector<int32_t> Reply(models::CausalLm& lm, const tokenizer::Tokenizer& tok, const std::vector<int32_t>& prompt,
                           const models::SamplingOptions& sampling, at::Generator& generator, const ChatIo& io) {
  const std::vector<int64_t> ids(prompt.begin(), prompt.end());
  std::vector<int32_t> reply, shown;
  TextStream stream(tok, io.out);
  const auto& stops = sampling.stop_tokens;
  models::Generate(lm, ids, sampling, generator, [&](int64_t id) {
    reply.push_back(static_cast<int32_t>(id));
    if (io.print_ids || std::find(stops.begin(), stops.end(), id) != stops.end()) return;
    shown.push_back(static_cast<int32_t>(id));
    stream.Show(shown);
  });
  if (io.print_ids) {
    PrintIds(io.out, ids);
    PrintIds(io.out, std::vector<int64_t>(reply.begin(), reply.end()));
  } else {
    stream.Finish(shown);
    io.out << "\n";
  }
  io.out << std::flush;
  return reply;
}

}  // namespace

int64_t RunChat(models::CausalLm& lm, ChatSession& session, const tokenizer::Tokenizer& tok,
                models::SamplingOptions sampling, at::Generator& generator, const std::string& first_turn,
                const ChatIo& io) {
  for (int32_t id : session.end_of_turn_ids()) sampling.stop_tokens.push_back(id);
  int64_t replies = 0;
  std::string line = first_turn;
  for (bool have = !line.empty();; have = false) {
    if (!have) {
      if (io.prompt_marks) io.err << "> " << std::flush;
      if (!std::getline(io.in, line)) break;
    }
    if (line.empty()) continue;
    std::vector<int32_t> prompt;
    try {
      prompt = session.PromptAfterUserTurn(line);
    } catch (const std::invalid_argument& e) {
      io.err << "ps_sample: this turn is left out: " << e.what() << "\n";
      continue;
    }
    std::vector<int32_t> reply = Reply(lm, tok, prompt, sampling, generator, io);
    if (!reply.empty() && std::find(sampling.stop_tokens.begin(), sampling.stop_tokens.end(), reply.back()) !=
                              sampling.stop_tokens.end()) {
      reply.pop_back();  // any stop token (an eos id besides the end-of-turn ones) stays out of the history
    }
    session.AddReply(std::move(reply));
    ++replies;
  }
  return replies;
}

}  // namespace ps::tools
