#include "env/env_int.h"
#include <string.h>
void grpo_env_python_opts_default(grpo_env_python_opts *o){memset(o,0,sizeof *o);}
grpo_err grpo_env_python_create(grpo_env **o, const grpo_env_python_opts *p){(void)o;(void)p;return grpo__fail(GRPO_EUNSUPPORTED,"stub");}
grpo_err grpo_env_plugin_load(grpo_env **o, const char *p, const char *c, int i){(void)o;(void)p;(void)c;(void)i;return grpo__fail(GRPO_EUNSUPPORTED,"stub");}
