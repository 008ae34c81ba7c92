// Runs kiln's decoding and transforms for compare_transforms.py, which runs torchvision's on the
// same files and compares.
//   probe jobs FILE
//     one job a line, its fields separated by tabs: IMAGE OUT CHANNELS MIN_SHORT_SIDE [STEP...]:
//     decodes IMAGE, applies the steps in order, writes the result to OUT: the rank, the sizes
//     (int64 each), then the values as f32, all little-endian. Steps: resize=N, resize=HxW,
//     center_crop=N, center_crop=HxW, resized_crop=TOP,LEFT,H,W,N, rrc_fallback=N
//     (random_resized_crop with scale (2, 2): always torchvision's centred fallback), hflip,
//     brightness=F, contrast=F, saturation=F, hue=F (color_jitter with one range {F, F}),
//     jitter=ORDER:B,C,S,H (functional::color_jitter with the order, four digits separated by
//     commas, and the factors, an empty one left out), to_float, normalize_imagenet.
//   probe folder ROOT
//     prints the classes ("class NAME INDEX") and samples ("sample PATH LABEL") of ImageFolder.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "main_guard.h"

using namespace kiln;

namespace {

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, separator);) out.push_back(part);
  return out;
}

std::vector<int64_t> numbers(const std::string& text, char separator) {
  std::vector<int64_t> out;
  for (const std::string& part : split(text, separator)) out.push_back(std::stoll(part));
  return out;
}

Shape size_of(const std::string& text) {
  const std::vector<int64_t> n = numbers(text, 'x');
  return n.size() == 1 ? Shape{n[0], n[0]} : Shape{n[0], n[1]};
}

data::Transform step(const std::string& spec) {
  const size_t eq = spec.find('=');
  const std::string name = spec.substr(0, eq);
  const std::string value = eq == std::string::npos ? "" : spec.substr(eq + 1);
  if (name == "resize")
    return value.find('x') == std::string::npos ? data::resize(std::stoll(value))
                                                : data::resize(size_of(value));
  if (name == "center_crop") return data::center_crop(size_of(value));
  if (name == "resized_crop") {
    const std::vector<int64_t> n = numbers(value, ',');
    return [n](const Tensor& x, data::Rng&) {
      return data::functional::resized_crop(x, n.at(0), n.at(1), n.at(2), n.at(3),
                                            {n.at(4), n.at(4)});
    };
  }
  if (name == "rrc_fallback") return data::random_resized_crop(std::stoll(value), {2.0, 2.0});
  if (name == "hflip") return data::random_horizontal_flip(1.0);
  if (name == "jitter") {
    const std::vector<std::string> parts = split(value, ':');
    data::functional::ColorJitterParams params;
    const std::vector<int64_t> order = numbers(parts.at(0), ',');
    for (size_t k = 0; k < 4; ++k) params.order[k] = static_cast<int>(order.at(k));
    // getline drops an empty last field: "0.8,,1.2," has three.
    const std::vector<std::string> factors = split(parts.at(1), ',');
    for (size_t k = 0; k < factors.size(); ++k)
      if (!factors[k].empty()) params.factors.at(k) = std::stod(factors[k]);
    return
        [params](const Tensor& x, data::Rng&) { return data::functional::color_jitter(x, params); };
  }
  const double f = value.empty() ? 1.0 : std::stod(value);
  if (name == "brightness") return data::color_jitter({f, f}, {1.0, 1.0}, {1.0, 1.0});
  if (name == "contrast") return data::color_jitter({1.0, 1.0}, {f, f}, {1.0, 1.0});
  if (name == "saturation") return data::color_jitter({1.0, 1.0}, {1.0, 1.0}, {f, f});
  if (name == "hue") return data::color_jitter({1.0, 1.0}, {1.0, 1.0}, {1.0, 1.0}, {f, f});
  if (name == "to_float") return data::to_float();
  if (name == "normalize_imagenet")
    return data::normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225});
  throw ValueError("probe: unknown step '" + spec + "'");
}

void write(const std::string& path, const Tensor& image) {
  const Tensor values = image.to(DType::f32).contiguous();
  std::ofstream out(path, std::ios::binary);
  const int64_t rank = values.dim();
  out.write(reinterpret_cast<const char*>(&rank), sizeof(rank));
  for (int64_t d : values.shape()) out.write(reinterpret_cast<const char*>(&d), sizeof(d));
  out.write(reinterpret_cast<const char*>(values.data<float>()),
            static_cast<std::streamsize>(values.numel() * sizeof(float)));
  if (!out) throw Error("probe: cannot write " + path);
}

void run_job(const std::vector<std::string>& fields) {
  if (fields.size() < 4) throw ValueError("probe: a job needs IMAGE OUT CHANNELS MIN_SHORT_SIDE");
  std::vector<data::Transform> steps;
  for (size_t i = 4; i < fields.size(); ++i) steps.push_back(step(fields[i]));
  Tensor image = data::read_image(
      fields[0], {.channels = std::stoi(fields[2]), .min_short_side = std::stoll(fields[3])});
  data::Rng rng(0, 0);
  if (!steps.empty()) image = data::compose(steps)(image, rng);
  write(fields[1], image);
}

int run(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 2 && args[0] == "folder") {
    const data::ImageFolder folder(args[1]);
    for (const auto& [name, index] : folder.class_to_idx())
      std::cout << "class " << name << " " << index << "\n";
    for (const auto& [path, label] : folder.samples())
      std::cout << "sample " << path << " " << label << "\n";
    return 0;
  }
  if (args.size() == 2 && args[0] == "ycck") {  // a CMYK JPEG as Photoshop writes them
    Tensor samples = empty({4, 36, 52}, DType::u8);
    uint8_t* p = samples.data<uint8_t>();
    for (int64_t c = 0; c < 4; ++c)
      for (int64_t y = 0; y < 36; ++y)
        for (int64_t x = 0; x < 52; ++x)
          *p++ = static_cast<uint8_t>((x * (3 + c) + y * (5 - c) + 40 * c + (x * y) % 7) % 256);
    const std::vector<uint8_t> bytes = data::encode_jpeg_cmyk(samples, 90);
    std::ofstream out(args[1], std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    if (!out) throw Error("probe: cannot write " + args[1]);
    return 0;
  }
  if (args.size() != 2 || args[0] != "jobs") throw ValueError("probe: see the usage in probe.cpp");
  std::ifstream jobs(args[1]);
  if (!jobs) throw Error("probe: cannot open " + args[1]);
  for (std::string line; std::getline(jobs, line);) run_job(split(line, '\t'));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kiln::apps::run_main("probe", [&] { return run(argc, argv); });
}
