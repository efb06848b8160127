// The server's one error form: every 4xx and 5xx answer is a JSON object {"error": MESSAGE} with
// "field" naming the request's field, header or limit when there is one. A part that refuses a
// request returns a Refusal; the routing (server.cpp) writes it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tessera::serve {

struct Refusal {
  int status = 400;     // the HTTP status, 4xx or 5xx
  std::string message;  // what was wrong, for a person
  std::string field;    // the field, header or limit at fault; empty when none
};

inline std::string error_json(const std::string& message, const std::string& field = "") {
  nlohmann::json j = {{"error", message}};
  if (!field.empty()) j["field"] = field;
  return j.dump();
}

inline std::string error_json(const Refusal& r) {
  return error_json(r.message, r.field);
}

}  // namespace tessera::serve
