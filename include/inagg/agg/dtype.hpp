// The element types, as agg names them: the type itself lives in util (util/dtype.hpp), because
// job descriptions (control) name it too.
#pragma once

#include "inagg/util/dtype.hpp"

namespace inagg::agg {

using util::Dtype;
using util::dtype_name;
using util::dtype_size;
using util::parse_dtype;

}  // namespace inagg::agg
