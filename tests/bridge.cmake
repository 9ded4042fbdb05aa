# trainer_bridge/: GRPO math against verl/TRL golden vectors, the batch codec, the NNG transport,
# and the integration test with real processes (a C publisher and a Python consumer).
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_bridge)
  grpo_add_test(bridge_math_test SOURCES bridge_math_test.c LIBS grpo_bridge grpo_common TIMEOUT 60)
endif()
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_bridge)
  grpo_add_test(bridge_batch_test SOURCES bridge_batch_test.c LIBS grpo_bridge grpo_common TIMEOUT 60)
endif()
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_bridge)
  grpo_add_test(bridge_transport_test SOURCES bridge_transport_test.c LIBS grpo_bridge grpo_common TIMEOUT 60)
endif()
