// Prometheus text exposition for the gateway's own families (spill log, drainer, engine).
#pragma once

#include <cstdio>
#include <string>

namespace sluice::gateway {

class Families {
 public:
  void family(const char* name, const char* type, const char* help) {
    text_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void sample(const std::string& name, const std::string& labels, double v) {
    char num[64];
    std::snprintf(num, sizeof num, "%.17g", v);
    text_ += name + (labels.empty() ? "" : "{" + labels + "}") + " " + num + "\n";
  }
  void one(const char* name, const char* type, const char* help, double v) {
    family(name, type, help);
    sample(name, "", v);
  }
  std::string take() { return std::move(text_); }

 private:
  std::string text_;
};

}  // namespace sluice::gateway
