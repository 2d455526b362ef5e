// The host's stand-in for CUDA's header (cuda_host.h has the type).
#pragma once
#include "cuda_host.h"
