// <ferry/policies.hpp>: every policy family and the presets.
#pragma once

#include <ferry/policies/backend.hpp>
#include <ferry/policies/epilogue.hpp>
#include <ferry/policies/growth.hpp>
#include <ferry/policies/launch.hpp>
#include <ferry/policies/pin.hpp>
#include <ferry/policies/presets.hpp>
#include <ferry/policies/reuse.hpp>
#include <ferry/policies/staging.hpp>
#include <ferry/policies/target.hpp>
